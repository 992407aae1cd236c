"""Which rows grow the store, what text they give it, and the store settings taken from the config."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from rapo_trl.rewards.view import policy_view
from rapo_trl.rollout import RolloutRow
from rapo_trl.rollout.types import RetrievalEvent
from rapo_trl.trainer.store_growth import best_of_each_group, configure_store


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


def args(**kwargs):
    return SimpleNamespace(**{"grow_store": False, "retrieval_top_k": None, "min_trace_reward": None,
                              "fallback_text": None, **kwargs})


def test_config_fields_reach_the_store_and_embedded_growth_is_single_process():
    store = SimpleNamespace(config=SimpleNamespace(top_k=5, min_reward=0.0, fallback_text="none"), path="/s")
    configure_store(store, args(retrieval_top_k=2, min_trace_reward=0.5), num_processes=1)
    assert (store.config.top_k, store.config.min_reward, store.config.fallback_text) == (2, 0.5, "none")
    with pytest.raises(ValueError, match="chroma run"):
        configure_store(store, args(grow_store=True), num_processes=2)
