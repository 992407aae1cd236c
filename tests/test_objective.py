"""RAPO's objective terms against hand-computed values."""

import math

import pytest
import torch

from rapo_trl.objective import (
    group_normalize,
    ratio_log_shift,
    retrieval_reward,
    reweight_advantages,
    trajectory_retrieval_reward,
)


def test_retrieval_reward_hand_computed():
    # H_pre = 2, H_post = 1: H_delta = 0.5, Z = tanh(1) * 2
    assert retrieval_reward(2.0, 1.0) == pytest.approx(math.tanh(1.0) * 2.0, rel=1e-6)
    # entropy rising after retrieval is penalised
    assert retrieval_reward(1.0, 3.0) == pytest.approx(math.tanh(-4.0) * 1.0, rel=1e-6)
    assert retrieval_reward(0.0, 0.0) == 0.0


def test_trajectory_z_skips_incomplete_and_averages():
    z = trajectory_retrieval_reward([(2.0, 1.0), (1.0, None), (1.0, 3.0)])
    assert z == pytest.approx((math.tanh(1.0) * 2.0 + math.tanh(-4.0)) / 2, rel=1e-6)
    assert trajectory_retrieval_reward([]) == 0.0
    assert trajectory_retrieval_reward([(None, 1.0)]) == 0.0


def test_group_normalize_hand_computed():
    x = torch.tensor([1.0, 3.0, 0.0, 0.0])
    out = group_normalize(x, 2, eps=1e-4)
    std = math.sqrt(2.0) + 1e-4  # unbiased std of (1, 3), plus eps
    assert out.tolist() == pytest.approx([-1 / std, 1 / std, 0.0, 0.0])  # a constant group gives 0, not nan


def test_all_zero_z_group_reduces_to_grpo():
    advantages = torch.tensor([0.5, -0.5, 1.0, -1.0])
    a_ret = group_normalize(torch.zeros(4), 4)
    assert torch.equal(reweight_advantages(advantages, a_ret, 0.2), advantages)


def test_groups_straddling_processes_use_global_statistics():
    # Two processes hold 3 rows each; groups of 4 straddle them. Normalising the gathered vector and
    # slicing must equal normalising each full group.
    z = torch.tensor([0.3, 0.0, 0.0, 0.9, 0.0, 0.1, 0.0, 0.0])
    full = group_normalize(z, 4)
    per_group = torch.cat([group_normalize(z[:4], 4), group_normalize(z[4:], 4)])
    assert torch.allclose(full, per_group)
    process_1 = full[3:6]  # rows 3..5 belong to two different groups
    assert process_1[0] > 0 and process_1[2] > 0


def test_reweight_advantages_hand_computed_and_token_level():
    a = torch.tensor([1.0, -2.0])
    a_ret = torch.tensor([0.5, -1.0])
    assert reweight_advantages(a, a_ret, 0.2).tolist() == pytest.approx([1.1, -1.6])
    tokens = a.unsqueeze(1).expand(2, 3)
    assert reweight_advantages(tokens, a_ret, 0.2)[:, 0].tolist() == pytest.approx([1.1, -1.6])


def test_ratio_log_shift():
    f = torch.tensor([0.0, 0.5])
    assert torch.exp(ratio_log_shift(f, 0.05)).tolist() == pytest.approx([1.0, 1.025])


def test_retrieval_advantage_epsilon_is_the_papers(tmp_path):
    """A group whose only retrieval has Z = 1e-4 (std 5e-5): the paper's eps (1e-6) gives it its full A_ret,
    TRL's 1e-4 would cut it to a third. RAPOConfig uses the paper's value and refuses a non-positive one."""
    from rapo_trl.config import RAPOConfig

    args = RAPOConfig(output_dir=str(tmp_path), use_cpu=True)
    assert args.retrieval_advantage_epsilon == 1e-6
    z = torch.tensor([1e-4, 0.0, 0.0, 0.0])
    full = 0.75e-4 / 5e-5  # (z - mean) / std = 1.5 (unbiased std, G = 4)
    assert group_normalize(z, 4, eps=args.retrieval_advantage_epsilon)[0].item() == pytest.approx(full, rel=0.03)
    assert group_normalize(z, 4, eps=1e-4)[0].item() == pytest.approx(full / 3, rel=0.03)
    with pytest.raises(ValueError, match="retrieval_advantage_epsilon"):
        RAPOConfig(output_dir=str(tmp_path), use_cpu=True, retrieval_advantage_epsilon=0.0)
