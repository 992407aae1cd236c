"""A record whose key is empty text (a first step stored without its prompt) keeps its store healthy."""

from __future__ import annotations

import numpy as np

from rapo_trl.embeddings import HashingEmbedder


def test_texts_without_words_get_one_unit_vector():
    vectors = HashingEmbedder().embed(["", "  ", "?!", "a word"])

    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(vectors[0], vectors[1])
    np.testing.assert_array_equal(vectors[0], vectors[2])
    assert not np.array_equal(vectors[0], vectors[3])


def test_a_store_with_empty_keys_passes_its_check(make_store, trajectory):
    store = make_store()
    store.add_trajectories([trajectory("1", tools=2), trajectory("2", topic="search a capital")], [1.0, 0.5],
                           ["q1", "q2"])
    assert "" in store.collection.get(include=["documents"])["documents"]

    store.check()


def test_a_store_holding_zero_vectors_passes_its_check(make_store, trajectory, embedder):
    """A store written before texts without words had a vector of their own holds zero vectors for them."""
    store = make_store()
    store.add_trajectories([trajectory("1", tools=2), trajectory("2", topic="search a capital")], [1.0, 0.5],
                           ["q1", "q2"])
    records = store.collection.get(include=["documents", "embeddings", "metadatas"])
    vectors = np.asarray(records["embeddings"], dtype=np.float32)
    vectors[[i for i, key in enumerate(records["documents"]) if not key]] = 0.0
    zeroed = make_store("zeroed")
    zeroed.collection.add(ids=records["ids"], embeddings=vectors, documents=records["documents"],
                          metadatas=records["metadatas"])

    zeroed.check()
