"""The selection rule (highest reward among top-k, ties by similarity, fallback) and batched select."""

from __future__ import annotations

import pytest

from rapo_trl.store import DEFAULT_FALLBACK_TEXT, StepRecord
from rapo_trl.store.selection import pick

CHOOSE_CASES = [
    # (rewards, cosine distances, expected chosen id or None for fallback)
    ([0.2, 0.9, 0.5], [0.0, 0.1, 0.2], "b"),  # highest reward wins over the nearest
    ([1.0, 1.0, 0.3], [0.3, 0.1, 0.0], "b"),  # tie on reward: the more similar one
    ([1.0, 1.0, 1.0], [0.2, 0.2, 0.1], "c"),
    ([0.0, -1.0, -0.5], [0.0, 0.1, 0.2], None),  # best reward 0 <= min_reward: fallback
    ([-1.0], [0.0], None),
    ([0.01], [0.9], "a"),  # any positive reward is used, however far
]


@pytest.mark.parametrize(("rewards", "distances", "expected"), CHOOSE_CASES)
def test_pick(rewards, distances, expected):
    ids = ["a", "b", "c"][: len(rewards)]
    got = pick(ids, rewards, distances, "cosine", 0.0)
    if expected is None:
        assert got is None
    else:
        index = ids.index(expected)
        assert got[0] == expected and got[1] == rewards[index] and got[2] == pytest.approx(1 - distances[index])


def test_pick_min_reward_is_configurable():
    assert pick(["a"], [0.5], [0.0], "cosine", 0.4)[0] == "a"
    assert pick(["a"], [0.5], [0.0], "cosine", 0.5) is None


def _record(rid, key, value, reward, question="q"):
    return StepRecord(rid, key, value, reward, question, 0, 1, "offline", rid, "t")


@pytest.fixture
def filled(make_store):
    store = make_store()
    store.add_records(
        [
            _record("a", "alpha beta gamma", "step A", 0.2),
            _record("b", "alpha beta delta", "step B", 0.9),
            _record("c", "alpha beta epsilon", "step C", 0.5),
            _record("d", "omega psi chi", "step D", 5.0),  # best reward, but never a neighbour of alpha
            _record("e", "lorem ipsum dolor", "step E", -1.0),
            _record("f", "lorem ipsum sit", "step F", 0.0),
        ]
    )
    return store


def test_select_keeps_the_best_reward_among_top_k(filled):
    got = filled.select(["alpha beta gamma", "omega psi chi"])
    assert [r.record_id for r in got] == ["b", "d"]
    assert got[0].text == "step B" and got[0].reward == 0.9 and 0 < got[0].similarity < 1
    assert got[1].similarity == pytest.approx(1.0, abs=1e-5) and got[1].source == "offline"


def test_select_top_k_is_configurable(filled):
    # with k=1 only the nearest key is considered
    assert filled.select(["alpha beta gamma"], top_k=1)[0].record_id == "a"


def test_select_falls_back_when_neighbours_are_not_rewarded(filled):
    got = filled.select(["lorem ipsum"], top_k=2)[0]
    assert got.is_fallback and got.text == DEFAULT_FALLBACK_TEXT and got.question_id is None
    # a caller's fallback text (the trainer's) for this call only; the store's own stays
    assert filled.select(["lorem ipsum"], top_k=2, fallback_text="Reason alone.")[0].text == "Reason alone."
    assert filled.config.fallback_text == DEFAULT_FALLBACK_TEXT


def test_select_is_one_embed_call_and_one_query(filled, embedder, monkeypatch):
    queries = []
    original = filled.collection.query
    monkeypatch.setattr(filled.collection, "query", lambda **kw: queries.append(kw) or original(**kw))
    embedder.calls.clear()
    contexts = [f"<|im_start|>user\nalpha beta {i}<|im_end|>" for i in range(17)]
    found = filled.select_timed(contexts)
    assert len(found.retrieved) == 17 and embedder.calls == [17] and len(queries) == 1
    assert found.embed_s > 0 and found.search_s > 0


def test_select_applies_the_key_preprocessing(filled):
    # system turn and chat tokens are dropped, so this is the same query as "alpha beta delta"
    raw = "<|im_start|>system\nomega psi chi<|im_end|>\n<|im_start|>user\nalpha beta delta<|im_end|>"
    assert filled.select([raw], top_k=1)[0].record_id == "b"


def test_select_on_an_empty_store_falls_back(make_store):
    store = make_store(fallback_text="Think for yourself.")
    got = store.select(["anything", "else"])
    assert [r.is_fallback for r in got] == [True, True] and got[0].text == "Think for yourself."
    assert got[0] is not got[1]
    assert store.select([]) == []
