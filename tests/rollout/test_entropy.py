"""Token and step entropies against closed forms."""

import math

import pytest
import torch

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
    assert step_entropy(full, topk, "topk", first_tokens=20) == pytest.approx(0.1)  # only the first 20 tokens
    assert step_entropy([], [], "topk") is None
    with pytest.raises(ValueError, match="estimator"):
        step_entropy(full, topk, "mean")
