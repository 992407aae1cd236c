"""The fast select path: ids + distances from the query, rewards from the in-memory map, one ``get``
for the winners; and the optional in-process index. Both must choose exactly what the plain rule
over Chroma's own metadata chooses, and never return a record Chroma no longer has."""

from __future__ import annotations

import hashlib
import random

import numpy as np
import pytest

from rapo_trl.embeddings import CallableEmbedder
from rapo_trl.store import StepRecord, StoreConfig
from rapo_trl.store.local_index import LocalIndex
from rapo_trl.store.selection import choose, fallback

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho".split()


def _record(rid, key, value, reward, question="q"):
    return StepRecord(rid, key, value, reward, question, 0, 1, "offline", rid, "t")


def _random_records(n, seed=0, prefix="r"):
    rng = random.Random(seed)
    return [
        _record(
            f"{prefix}{i}",
            " ".join(rng.choice(WORDS) for _ in range(4)) + f" {prefix}{i}",  # no two keys alike
            f"step {prefix}{i}",
            rng.choice([1.0, 0.5, 0.0, -1.0, 1.0]),
            f"q{i % 7}",
        )
        for i in range(n)
    ]


def _queries(n, seed=1):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(3)) for _ in range(n)]


def _reference(store, contexts, top_k=3, min_reward=0.0):
    """The rule applied to Chroma's own metadata (the pre-map implementation), over the k nearest records and every
    one as near as the k-th (hashed bags of words often meet a query at one distance)."""
    vectors = store._embed([store.preprocess(c) for c in contexts])
    result = store.collection.query(
        query_embeddings=vectors, n_results=len(store), include=["metadatas", "distances"]
    )
    text = store.config.fallback_text
    chosen = []
    for ids, distances, metadatas in zip(result["ids"], result["distances"], result["metadatas"], strict=True):
        near = [(d, i, m) for i, d, m in zip(ids, distances, metadatas, strict=True) if d <= distances[top_k - 1]]
        near.sort(key=lambda candidate: candidate[:2])
        chosen.append(choose([i for _, i, _ in near], [d for d, _, _ in near], [m for _, _, m in near],
                             store.config.hnsw_space, min_reward, text) if near else fallback(text))
    return chosen


def _text_seeded_embedder(dimension=32):
    """Random unit vectors seeded by each text: no two texts at one distance from a query."""

    def embed(texts):
        return np.stack([np.random.default_rng(list(hashlib.sha256(t.encode()).digest())).normal(size=dimension)
                         for t in texts])

    return CallableEmbedder(embed, f"text-seeded-{dimension}", dimension)


def _count_calls(monkeypatch, collection):
    calls = {"query": 0, "get": 0}
    for name in calls:
        original = getattr(collection, name)

        def wrapper(*args, _name=name, _original=original, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(collection, name, wrapper)
    return calls


@pytest.mark.parametrize("top_k", [1, 3, 5])
def test_fast_select_matches_the_rule_on_chroma_metadata(make_store, top_k):
    store = make_store()
    store.add_records(_random_records(120))
    contexts = _queries(40)
    for cold in (True, False):  # reward map empty (read on sight), then filled
        if cold:
            store.forget_rewards()
        assert store.select(contexts, top_k=top_k) == _reference(store, contexts, top_k)


def test_select_is_one_query_and_one_get(make_store, monkeypatch):
    store = make_store(embedder_=_text_seeded_embedder())  # a key tied with the k-th nearest would be asked for again
    store.add_records(_random_records(50))  # this object's writes fill the map
    calls = _count_calls(monkeypatch, store.collection)
    found = store.select_timed(_queries(20))
    got = found.retrieved
    assert calls == {"query": 1, "get": 1} and found.embed_s > 0 and found.search_s > 0
    assert any(not r.is_fallback for r in got)
    store.forget_rewards()
    calls.update(query=0, get=0)
    store.select(_queries(20))
    assert calls == {"query": 1, "get": 1}  # the candidates' metadata, winners included


def test_load_rewards_reads_every_record(make_store):
    store = make_store(read_batch_size=7)
    store.add_records(_random_records(30))
    store.forget_rewards()
    assert store.load_rewards() == 30 and store._rewards["r3"] == _random_records(30)[3].reward


@pytest.fixture
def near(make_store):
    store = make_store(top_k=2)
    store.add_records(
        [
            _record("a", "alpha beta gamma", "step A", 0.9),
            _record("b", "alpha beta", "step B", 0.5),
            _record("z", "omega psi chi", "step Z", 1.0),
            _record("x1", "lorem ipsum dolor", "step X1", -1.0),
            _record("x2", "sit amet consectetur", "step X2", -1.0),
        ]
    )
    assert store.select(["alpha beta gamma"])[0].record_id == "a"
    return store


def test_records_added_by_another_store_object_are_seen(near, make_store):
    other = make_store(top_k=2)  # same directory, its own client and reward map
    assert other.add_records([_record("c", "alpha beta gamma delta", "step C", 2.0)]) == 1
    got = near.select(["alpha beta gamma"])[0]
    assert got.record_id == "c" and got.reward == 2.0 and got.text == "step C"


def test_a_reward_changed_behind_the_map_is_not_trusted(near):
    near.collection.update(ids=["a"], metadatas=[{"reward": -1.0, "value": "step A"}])
    got = near.select(["alpha beta gamma"])[0]
    assert got.record_id == "b" and got.reward == 0.5
    assert near._rewards["a"] == -1.0


def test_a_winner_deleted_behind_the_map_is_never_returned(near):
    near.collection.delete(ids=["a", "b"])
    got = near.select(["alpha beta gamma"])[0]
    assert got.record_id == "z" or got.is_fallback
    near.collection.delete(ids=["z"])
    assert near.select(["alpha beta gamma"])[0].is_fallback  # empty store


# ---------------------------------------------------------------- optional in-process index


def _kinds():
    kinds = ["exact"]
    try:
        import hnswlib  # noqa: F401

        kinds.append("hnsw")
    except ImportError:
        pass
    return kinds


def _unit(rows, dimension, seed):
    vectors = np.random.default_rng(seed).normal(size=(rows, dimension)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@pytest.mark.parametrize("kind", _kinds())
def test_local_index_selects_what_chroma_selects(make_store, embedder, kind):
    store = make_store(local_index=kind)
    queries = _unit(30, embedder.dimension, seed=1)  # random vectors: no exact ties
    assert all(r.is_fallback for r in store.select_embedded(queries))  # empty store
    store.add_records(_random_records(150), embeddings=_unit(150, embedder.dimension, seed=0))
    assert len(store._local) == 150  # followed this object's writes
    got = store.select_embedded(queries)
    result = store.collection.query(query_embeddings=queries, n_results=3, include=["metadatas", "distances"])
    reference = [
        choose(i, d, m, "cosine", 0.0, store.config.fallback_text)
        for i, d, m in zip(result["ids"], result["distances"], result["metadatas"], strict=True)
    ]
    assert [r.record_id for r in got] == [r.record_id for r in reference]
    # float32 distances computed two ways: measured 2e-7 apart
    assert [r.similarity for r in got] == pytest.approx([r.similarity for r in reference], abs=2e-6)
    assert not all(r.is_fallback for r in got)


@pytest.mark.parametrize("kind", _kinds())
def test_local_index_follows_other_writers_and_deletions(near, make_store, kind):
    store = make_store(local_index=kind, top_k=2, local_index_sync_s=0)
    assert store.select(["alpha beta gamma"])[0].record_id == "a" and len(store._local) == 5
    near.add_records([_record("c", "alpha beta gamma delta", "step C", 2.0)])  # another object
    assert store.select(["alpha beta gamma"])[0].record_id == "c" and len(store._local) == 6
    near.collection.delete(ids=["c"])
    assert store.select(["alpha beta gamma"])[0].record_id == "a" and "c" not in store._local
    # deleted and one added behind its back, count unchanged: the winner is still checked in Chroma
    near.collection.delete(ids=["a"])
    near.add_records([_record("d", "lorem ipsum dolor", "step D", 0.1)])
    got = store.select(["alpha beta gamma"])[0]
    assert got.record_id == "b" and "a" not in store._local


def test_local_index_refuses_an_unknown_kind():
    with pytest.raises(ValueError, match="local_index must be None, 'hnsw' or 'exact'"):
        StoreConfig(local_index="faiss")
    with pytest.raises(ValueError, match="Unknown local index kind"):
        LocalIndex("faiss", 4)


def test_build_local_index_needs_a_kind(make_store):
    with pytest.raises(ValueError, match="has no local index"):
        make_store().build_local_index()


@pytest.mark.parametrize("space", ["cosine", "l2", "ip"])
def test_exact_local_index_uses_chromas_distances(space):
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(20, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = LocalIndex("exact", 8, space)
    index.add([f"v{i}" for i in range(20)], vectors)
    ids, distances = index.knn(vectors[:3], 2)
    assert [row[0] for row in ids] == ["v0", "v1", "v2"]
    assert np.allclose([row[0] for row in distances], 0.0, atol=1e-5)
    sims = vectors[:3] @ vectors.T
    expected = {"cosine": 1 - sims, "ip": 1 - sims, "l2": 2 - 2 * sims}[space]
    for row, (row_ids, row_distances) in enumerate(zip(ids, distances, strict=True)):
        for record_id, distance in zip(row_ids, row_distances, strict=True):
            assert distance == pytest.approx(expected[row, int(record_id[1:])], abs=1e-5)


@pytest.mark.parametrize("kind", _kinds())
def test_local_index_add_remove_and_add_again(kind):
    index = LocalIndex(kind, 4, "cosine")
    eye = np.eye(4, dtype=np.float32)
    assert index.add(["a", "b", "c"], eye[:3]) == 3 and index.add(["a"], eye[:1]) == 0
    index.remove(["a", "missing"])
    assert len(index) == 2 and "a" not in index
    assert "a" not in index.knn(eye[:1], 3)[0][0]
    assert index.add(["a"], eye[3:4]) == 1 and "a" in index  # back, with a new vector
    assert index.knn(eye[3:4], 1)[0] == [["a"]]
    assert index.knn(np.zeros((2, 4), np.float32) + 1, 5)[0][0].__len__() == 3


def test_local_index_checks_for_other_writers_at_most_every_sync_interval(near, make_store):
    store = make_store(local_index="exact", top_k=2, local_index_sync_s=3600)
    assert store.select(["alpha beta gamma"])[0].record_id == "a"
    near.add_records([_record("c", "alpha beta gamma delta", "step C", 2.0)])
    assert store.select(["alpha beta gamma"])[0].record_id == "a"  # not looked for yet
    store.sync_local_index()
    assert store.select(["alpha beta gamma"])[0].record_id == "c"


@pytest.mark.parametrize("kind", [None, *_kinds()])
def test_keys_as_near_as_the_kth_are_all_candidates(make_store, kind):
    """Trajectories of one question that begin alike share their first keys: a query meets them at one distance, and
    which of them the k nearest hold was the search's accident (Chroma's HNSW and the local index kept different
    ones). Every key as near as the k-th is a candidate, the best reward among them is retrieved."""
    store = make_store(local_index=kind)
    question = "what is twelve times seven"
    tied = [_record(f"t{i}", question, f"step t{i}", reward) for i, reward in enumerate([0.2, 0.4, 0.6, 0.8, 1.0])]
    store.add_records(tied + _random_records(20))
    for top_k in (1, 3, 5):
        got = store.select([question], top_k=top_k)[0]
        assert (got.record_id, got.reward) == ("t4", 1.0)
    ids, _ = store._neighbours(store._embed([question]), 3, None)
    assert ids == [["t0", "t1", "t2", "t3", "t4"]]  # one distance: in id order
    own = store.select([question], question_ids=["q"])[0]
    assert (own.record_id, own.reward) == ("t4", 1.0)
