"""Which rows grow the store, what text they give it, and the store settings taken from the config."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from rapo_trl.rewards.view import policy_view
from rapo_trl.rollout import RetrievalEvent, RolloutRow
from rapo_trl.trainer.store_growth import best_of_each_group, check_store_growth


def test_best_of_each_group_on_this_process_above_the_minimum():
    rewards = torch.tensor([0.0, 2.0, 1.0, 0.5,   # group 0: best is row 1 (process 0)
                            3.0, 0.0, 0.0, 0.0,   # group 1: best is row 4 (process 1)
                            0.1, 0.2, 0.0, 0.0])  # group 2: best 0.2 < min
    assert best_of_each_group(rewards, 4, start=0, n_local=6, min_reward=1.0) == [(1, 2.0), (4, 3.0)]
    assert best_of_each_group(rewards, 4, start=6, n_local=6, min_reward=0.0) == [(3, pytest.approx(0.2))]


def test_policy_view_removes_retrieved_spans_by_position():
    row = RolloutRow([1], completion_ids=[10, 11, 12, 13, 14, 15])
    row.retrievals = [RetrievalEvent(0, 1, 3, False, None, None, None), RetrievalEvent(1, 4, 5, True, None, None, None)]
    assert policy_view(row) == [10, 13, 15]
    assert policy_view(row, keep_retrieved=True) == row.completion_ids


def test_embedded_growth_is_single_process():
    store = SimpleNamespace(path="/s")
    check_store_growth(store, SimpleNamespace(store_growth_min_reward=1.0), num_processes=1)
    with pytest.raises(ValueError, match="chroma run"):
        check_store_growth(store, SimpleNamespace(store_growth_min_reward=1.0), num_processes=2)


def test_a_grown_record_keeps_its_rows_question_id_even_when_it_is_zero():
    from rapo_trl.question_ids import question_id_of
    from rapo_trl.trainer.store_growth import _question_id

    prompt = [{"role": "user", "content": "q?"}]
    assert _question_id({"question_id": 0}, prompt) == "0"  # the id retrieve_own_question compares, as a string
    assert _question_id({"question_id": "7"}, prompt) == "7"
    hashed = _question_id({}, prompt)
    assert hashed == question_id_of("q?") == _question_id({"question_id": None}, prompt)  # the id to_rapo_rows gives
