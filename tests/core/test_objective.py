"""RAPO's objective terms against hand-computed values."""

import math

import pytest
import torch

from rapo_trl.core.objective import (
    dual_clipped_token_loss,
    group_normalize,
    retrieval_reward,
    retrieved_fraction,
    reweight_advantages,
    shaped_ratio,
    token_mean,
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


def test_shaped_ratio_is_one_plus_m_f_ret_times_r():
    f = torch.tensor([0.0, 0.5])
    logps, old = torch.tensor([[-1.0], [-1.0]]), torch.tensor([[-1.0], [-1.0 - math.log(2.0)]])  # r = 1 and 2
    assert shaped_ratio(logps, old, f, 0.05).flatten().tolist() == pytest.approx([1.0, 2 * 1.025])
    assert retrieved_fraction(3, 12) == 0.25 and retrieved_fraction(0, 0) == 0.0


def test_dual_clipped_token_loss_and_token_mean():
    ratio = torch.tensor([[0.5, 1.5, 5.0]])
    # A > 0: the clip caps the gain at 1 + eps_high, and a low ratio keeps its own (smaller) value.
    assert dual_clipped_token_loss(ratio, torch.tensor([1.0]), 0.2, 0.28, 3.0)[0].tolist() == pytest.approx(
        [-0.5, -1.28, -1.28])
    # A < 0: a low ratio is clipped at 1 - eps_low, a ratio beyond delta costs at most delta * |A|.
    assert dual_clipped_token_loss(ratio, torch.tensor([-1.0]), 0.2, 0.28, 3.0)[0].tolist() == pytest.approx(
        [0.8, 1.5, 3.0])
    assert dual_clipped_token_loss(ratio, torch.tensor([-1.0]), 0.2, 0.28, None)[0, 2].item() == pytest.approx(5.0)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    assert token_mean(torch.tensor([[1.0, 3.0, 100.0]]), mask).item() == 2.0


def test_retrieval_advantage_epsilon_is_the_papers(tmp_path):
    """A group whose only retrieval has Z = 1e-4 (std 5e-5): the paper's eps (1e-6) gives it its full A_ret,
    TRL's 1e-4 would cut it to a third. RAPOConfig uses the paper's value and refuses a non-positive one."""
    from rapo_trl.config import RAPOConfig

    args = RAPOConfig(output_dir=str(tmp_path), use_cpu=True)
    assert args.retrieval_advantage_epsilon == 1e-6
    z = torch.tensor([1e-4, 0.0, 0.0, 0.0])
    def a_ret(eps):  # (z - mean) / (std + eps), unbiased std 5e-5 (G = 4): 1.5 without eps
        return 0.75e-4 / (5e-5 + eps)

    assert group_normalize(z, 4, eps=args.retrieval_advantage_epsilon)[0].item() == pytest.approx(a_ret(1e-6), rel=1e-5)
    assert a_ret(1e-6) == pytest.approx(1.5, rel=0.02) and a_ret(1e-4) == pytest.approx(1.5 / 3)
    assert group_normalize(z, 4, eps=1e-4)[0].item() == pytest.approx(a_ret(1e-4), rel=1e-5)
    with pytest.raises(ValueError, match="retrieval_advantage_epsilon"):
        RAPOConfig(output_dir=str(tmp_path), use_cpu=True, retrieval_advantage_epsilon=0.0)


def test_the_core_imports_torch_only():
    """The algorithm reads without TRL: its modules import the standard library, torch and each other only."""
    import ast
    import sys
    from pathlib import Path

    import rapo_trl.core

    for path in Path(rapo_trl.core.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or top == "torch" or name.startswith("rapo_trl.core"), (
                    path.name, name)
