"""Token and step entropies against closed forms."""

import math

import pytest
import torch

from rapo_trl.core.objective import retrieval_reward
from rapo_trl.rollout.entropy import step_entropy, token_entropies


def test_uniform_and_masked_distributions():
    vocab = 50
    logits = torch.zeros(2, vocab)
    logits[1, 4:] = -math.inf  # uniform over 4 tokens
    full, topk = token_entropies(logits, top_k=10)
    assert full.tolist() == pytest.approx([math.log(vocab), math.log(4)], rel=1e-6)
    # top-10 of a uniform-over-50: 10 * (1/50) * log 50, normalised by log 50
    assert topk.tolist() == pytest.approx([10 / vocab, math.log(4) / math.log(vocab)], rel=1e-6)
    assert torch.isfinite(full).all() and torch.isfinite(topk).all()


def test_peaked_distribution_has_low_entropy():
    logits = torch.full((1, 100), -20.0)
    logits[0, 3] = 20.0
    full, topk = token_entropies(logits)
    assert full.item() < 1e-6 and 0 <= topk.item() < 1e-6


def test_step_entropy_estimators():
    full = [1.0, 2.0, 3.0]
    topk = [0.1] * 25 + [0.9] * 5
    assert step_entropy(full, topk, "full") == pytest.approx(2.0)
    # The reference code sums over the first 20 tokens only: 20 * 0.1, the 0.9s never count.
    assert step_entropy(full, topk, "topk", first_tokens=20) == pytest.approx(2.0)
    assert step_entropy(full, topk, "topk_mean", first_tokens=20) == pytest.approx(0.1)
    assert step_entropy(full, [0.1] * 8, "topk") == pytest.approx(0.8)  # a short step sums fewer tokens
    assert step_entropy([], [], "topk") is None and step_entropy([], [], "topk_mean") is None
    with pytest.raises(ValueError, match="estimator"):
        step_entropy(full, topk, "mean")


def test_topk_sum_gives_the_reference_retrieval_reward():
    """Token entropy 0.1, a 30-token step before the retrieval and an 8-token step after it.

    Reference (sum over <= 20 tokens): H_pre = 2.0, H_post = 0.8, H_delta = -(0.8 - 2) / 2 = 0.6,
    Z = tanh(1.2) * 2 = 1.667. A per-token mean sees 0.1 on both sides and gives Z = 0.
    """
    pre, post = [0.1] * 30, [0.1] * 8
    z_sum = retrieval_reward(step_entropy(pre, pre, "topk"), step_entropy(post, post, "topk"))
    assert z_sum == pytest.approx(math.tanh(1.2) * 2.0, rel=1e-6)
    assert round(z_sum, 3) == 1.667
    z_mean = retrieval_reward(step_entropy(pre, pre, "topk_mean"), step_entropy(post, post, "topk_mean"))
    assert z_mean == pytest.approx(0.0, abs=1e-6)
