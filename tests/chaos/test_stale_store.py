"""A store that would retrieve wrongly is refused before any training, never searched: one built in another store
format (keys embedded from their start, before format 2) or by another embedder (when it is opened), one whose
vector index lost a file, one with records without a usable reward (``TraceStore.check``, which RAPOTrainer runs
before its first step)."""

from __future__ import annotations

import shutil

import chromadb
import numpy as np
import pytest

from rapo_trl.embeddings import HashingEmbedder
from rapo_trl.store import CorruptStoreError, EmbedderMismatchError, StaleStoreError, StoreConfig, TraceStore
from rapo_trl.store.backend import STORE_FORMAT, _settings
from tests.helpers.trainers import rapo_trainer

TRAJECTORY = "<think>a{0}</think>\n<python>print({0})</python>\n<result>\n{0}\n</result>\n<answer>{0}</answer>"


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


def _open(path):
    return TraceStore(path, collection="steps", embedder=HashingEmbedder(64, name="h64"),
                      config=StoreConfig(show_progress=False))


@pytest.fixture(scope="module")
def persisted_store(tmp_path_factory):
    """1,200 records: past Chroma's sync threshold (1,000), so its HNSW index is on disk and its log no longer holds
    every record (a smaller store is rebuilt from the log whole, whatever index file is lost)."""
    path = tmp_path_factory.mktemp("persisted") / "store"
    with _open(path) as store:
        n = 600
        store.add_trajectories([TRAJECTORY.format(i) for i in range(n)], [1.0] * n, [f"q{i}" for i in range(n)],
                               prompts=[f"Q{i}" for i in range(n)], keep_top_k=None)
    return path


def _index_folder(path):
    (folder,) = [p for p in path.iterdir() if p.is_dir()]  # the collection's vector segment
    return folder


@pytest.mark.parametrize("lost", ["data_level0.bin", "header.bin", "the whole folder"])
def test_a_store_that_lost_an_index_file_is_refused_before_training(persisted_store, tmp_path, tiny_model_dir, lost):
    path = shutil.copytree(persisted_store, tmp_path / "store")
    with _open(path) as store:
        store.check()  # whole: it passes
    folder = _index_folder(path)
    shutil.rmtree(folder) if lost == "the whole folder" else (folder / lost).unlink()
    store = _open(path)  # Chroma opens it, and would fail (or search what is left) at the first retrieval
    trainer = rapo_trainer(tiny_model_dir, tmp_path / "run", store, max_steps=1, retrieve_prob=1.0)
    with pytest.raises(CorruptStoreError, match=r"trace store .*store \(collection 'steps'\) cannot be (read|searched)"
                       r" .*an index file is missing or damaged\. Rebuild it .*rapo build-store --store_path NEW"):
        trainer.train()
    assert trainer.state.global_step == 0
    store.close()


def test_records_without_a_usable_reward_are_refused_before_training(tmp_path, tiny_model_dir):
    _built(tmp_path / "store")
    client = chromadb.PersistentClient(path=str(tmp_path / "store"), settings=_settings())
    collection = client.get_collection("steps", embedding_function=None)
    vectors = np.random.default_rng(0).normal(size=(2, 64)).astype(np.float32)
    collection.add(ids=["imported-0", "imported-1"], embeddings=vectors, documents=["Q", "Q"],  # written by hand
                   metadatas=[{"value": "<answer>1</answer>", "question_id": "q"},
                              {"value": "<answer>2</answer>", "question_id": "q", "reward": "n/a"}])
    client.close()
    store = _open(tmp_path / "store")
    with pytest.raises(CorruptStoreError, match=r"2 of 4 records .* have no usable reward, e\.g\. imported-0 \(none\), "
                       r"imported-1 \('n/a'\): retrieval ranks records by reward"):
        rapo_trainer(tiny_model_dir, tmp_path / "run", store, max_steps=1, retrieve_prob=1.0).train()
    # Searched anyway (no check), the record is named, not a KeyError deep in the rollout.
    with pytest.raises(CorruptStoreError, match="Record imported-[01] of the trace store .* has (no reward|the reward 'n/a')"):
        store.select_embedded(vectors[:1], top_k=4)
    store.close()


def test_an_index_that_does_not_find_its_own_records_is_refused(tmp_path, monkeypatch):
    """An index that answers but misses records (simulated: no Chroma version at hand loses part of an index and
    still answers every query): the probed records are not their own nearest neighbours."""
    _built(tmp_path / "store")
    with _open(tmp_path / "store") as store:
        real_query = store.collection.query

        def far(**kwargs):
            found = real_query(**kwargs)
            return {**found, "distances": [[d + 0.5 for d in row] for row in found["distances"]]}

        monkeypatch.setattr(store.collection, "query", far)
        with pytest.raises(CorruptStoreError, match="misses records: 2 of 2 probed records are not found by their own"):
            store.check()
