"""The outcome advantage's baselines against hand-computed values, and the table's contract."""

import math
from types import SimpleNamespace

import pytest
import torch

from rapo_trl.core.advantage_baselines import (
    ADVANTAGE_BASELINES,
    outcome_advantages,
    shown_a_stored_step,
    shown_mask,
)
from rapo_trl.core.objective import group_normalize

EPS = 1e-4
SQRT_THIRD = math.sqrt(1 / 3)


def test_group_is_grpos_statistics_over_every_row():
    rewards, shown = torch.tensor([1.0, 1.0, 0.0, 0.0]), torch.tensor([True, False, False, False])
    out = ADVANTAGE_BASELINES["group"](rewards, shown, EPS)
    # mean 0.5, unbiased std sqrt(1/3), whichever rows were shown a stored step
    assert out.tolist() == pytest.approx([0.5 / (SQRT_THIRD + EPS)] * 2 + [-0.5 / (SQRT_THIRD + EPS)] * 2)


def test_on_policy_takes_mean_and_std_of_the_rows_not_shown_and_applies_them_to_every_row():
    rewards, shown = torch.tensor([1.0, 1.0, 0.0, 0.0]), torch.tensor([True, False, False, False])
    out = ADVANTAGE_BASELINES["on_policy"](rewards, shown, EPS)
    # on-policy rows (1, 0, 0): mean 1/3, unbiased std sqrt(1/3)
    high, low = (2 / 3) / (SQRT_THIRD + EPS), (-1 / 3) / (SQRT_THIRD + EPS)
    assert out.tolist() == pytest.approx([high, high, low, low])


def test_on_policy_std_zero_counts_as_one():
    # every on-policy row failed: GRPO pushes them down for the shown row's success; on_policy leaves them at 0
    rewards, shown = torch.tensor([1.0, 0.0, 0.0, 0.0]), torch.tensor([True, False, False, False])
    out = ADVANTAGE_BASELINES["on_policy"](rewards, shown, EPS)
    assert out.tolist() == pytest.approx([1 / (1 + EPS), 0.0, 0.0, 0.0])
    assert ADVANTAGE_BASELINES["group"](rewards, shown, EPS)[1:].lt(0).all()
    # one on-policy row: no spread to estimate, so the same
    one = ADVANTAGE_BASELINES["on_policy"](torch.tensor([2.0, 1.0, 0.5]), torch.tensor([True, True, False]), EPS)
    assert one.tolist() == pytest.approx([1.5 / (1 + EPS), 0.5 / (1 + EPS), 0.0])


def test_on_policy_without_on_policy_rows_falls_back_to_the_whole_group():
    rewards, shown = torch.tensor([1.0, 3.0, 0.0, 2.0]), torch.ones(4, dtype=torch.bool)
    assert torch.equal(ADVANTAGE_BASELINES["on_policy"](rewards, shown, EPS),
                       ADVANTAGE_BASELINES["group"](rewards, shown, EPS))
    assert ADVANTAGE_BASELINES["on_policy"](torch.ones(2), torch.ones(2, dtype=torch.bool), EPS).tolist() == [0, 0]


def test_on_policy_leaves_unscored_rows_out_and_gives_them_zero():
    rewards = torch.tensor([1.0, float("nan"), 1.0, 0.0, 0.0])
    shown = torch.tensor([True, False, False, False, False])
    out = ADVANTAGE_BASELINES["on_policy"](rewards, shown, EPS)
    high, low = (2 / 3) / (SQRT_THIRD + EPS), (-1 / 3) / (SQRT_THIRD + EPS)
    assert out.tolist() == pytest.approx([high, 0.0, high, low, low])


def test_outcome_advantages_apply_the_baseline_group_by_group():
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    shown = torch.tensor([True, False, False, False] * 2)
    on_policy = outcome_advantages(rewards, shown, 4, "on_policy", EPS)
    assert on_policy[:4].tolist() == pytest.approx(ADVANTAGE_BASELINES["on_policy"](rewards[:4], shown[:4], EPS).tolist())
    assert on_policy[4:].tolist() == pytest.approx([1 / (1 + EPS), 0.0, 0.0, 0.0])
    # the default is GRPO's group normalisation, bit for bit
    assert torch.equal(outcome_advantages(rewards, shown, 4), group_normalize(rewards, 4, eps=EPS))
    with pytest.raises(ValueError, match="groups of 3"):
        outcome_advantages(rewards, shown, 3)
    with pytest.raises(ValueError, match=r"advantage_baseline must be one of \('group', 'on_policy'\)"):
        outcome_advantages(rewards, shown, 4, "luffy")


def test_shown_means_a_hybrid_row_given_a_stored_step_not_only_the_fallback():
    def row(hybrid, *fallbacks):
        return SimpleNamespace(is_hybrid=hybrid, retrievals=[SimpleNamespace(is_fallback=f) for f in fallbacks])

    rows = [row(True, False), row(True, True, False), row(True, True), row(True), row(False)]
    assert [shown_a_stored_step(r) for r in rows] == [True, True, False, False, False]
    assert shown_mask(rows).tolist() == [True, True, False, False, False]
