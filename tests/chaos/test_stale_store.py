"""A store built in another store format (keys embedded from their start, before format 2) or by another embedder
is refused when it is opened, before any training, never searched with queries its keys do not match."""

from __future__ import annotations

import chromadb
import pytest

from rapo_trl.embeddings import HashingEmbedder
from rapo_trl.store import EmbedderMismatchError, StaleStoreError, StoreConfig, TraceStore
from rapo_trl.store.backend import STORE_FORMAT, _settings


def _built(path):
    with TraceStore(path, collection="steps", embedder=HashingEmbedder(64, name="h64"),
                    config=StoreConfig(show_progress=False)) as store:
        store.add_trajectories(["<think>a</think>\n<python>print(1)</python>\n<result>\n1\n</result>\n<answer>1</answer>"],
                               [1.0], ["q"], prompts=["Q"])


def _set_format(path, value):
    client = chromadb.PersistentClient(path=str(path), settings=_settings())
    collection = client.get_collection("steps", embedding_function=None)
    metadata = {k: v for k, v in collection.metadata.items() if k != "rapo_store_format"}
    if value is not None:
        metadata["rapo_store_format"] = value
    collection.modify(metadata=metadata)
    client.close()


@pytest.mark.parametrize("stored, why", [(1, "before keys were embedded from their newest end"),
                                         (None, "before keys were embedded from their newest end"),  # no format recorded
                                         (STORE_FORMAT + 1, "a newer rapo_trl built it")])
def test_a_store_of_another_format_is_refused_with_what_to_do(tmp_path, stored, why):
    _built(tmp_path / "store")
    _set_format(tmp_path / "store", stored)
    with pytest.raises(StaleStoreError, match=f"store format {stored or 1}, this rapo_trl reads format {STORE_FORMAT}"
                       f": .*{why}.*rapo build-store --store_path NEW"):
        TraceStore(tmp_path / "store", collection="steps", embedder=HashingEmbedder(64, name="h64"))


def test_the_current_format_opens_and_another_embedder_is_refused(tmp_path):
    _built(tmp_path / "store")
    with TraceStore(tmp_path / "store", collection="steps", embedder=HashingEmbedder(64, name="h64")) as store:
        assert len(store) == 2  # the step and the answer
    with pytest.raises(EmbedderMismatchError, match="built with embedder 'h64'"):
        TraceStore(tmp_path / "store", collection="steps", embedder=HashingEmbedder(32, name="h32"))
