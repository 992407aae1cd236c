"""Inverse-CDF token sampling: the distribution asked for, never a token of probability 0, bad rows refused."""

import pytest
import torch

from rapo_trl.rollout.backends import sampling
from rapo_trl.rollout.backends.sampling import sample_tokens


def test_draws_follow_the_probabilities_and_skip_zero_entries():
    probs = torch.tensor([0.0, 0.5, 0.0, 0.3, 0.15, 0.05, 0.0])
    draws = 200_000
    generator = torch.Generator().manual_seed(0)
    tokens = sample_tokens(probs.expand(draws, -1) * 3.0, generator=generator)  # rows need not sum to 1
    counts = torch.bincount(tokens, minlength=len(probs)).double()
    assert counts[probs == 0].sum() == 0
    expected = probs.double() * draws
    sigma = (expected * (1 - probs.double())).sqrt()
    assert ((counts - expected).abs() <= 5 * sigma + 1e-9).all(), counts


def test_each_row_draws_from_its_own_distribution():
    probs = torch.zeros(4, 6)
    for row, token in enumerate((5, 0, 3, 1)):
        probs[row, token] = 1.0
    assert sample_tokens(probs).tolist() == [5, 0, 3, 1]


def test_the_largest_uniform_still_lands_on_a_token_with_probability(monkeypatch):
    # The largest float32 below 1: the search must end on the last entry with probability, never past the row or on
    # the trailing zero entries.
    largest = float(torch.tensor(1.0).nextafter(torch.tensor(0.0)))
    monkeypatch.setattr(sampling.torch, "rand", lambda *shape, **kw: torch.full(shape, largest))
    probs = torch.tensor([[0.1, 0.7, 0.2, 0.0, 0.0], [3.0, 0.0, 0.0, 0.0, 1.0], [0.3, 0.3, 0.3, 0.1, 0.0]])
    assert sample_tokens(probs).tolist() == [2, 4, 3]


def test_the_seed_fixes_the_draws():
    probs = torch.softmax(torch.randn(8, 1000), dim=-1)
    first = sample_tokens(probs, generator=torch.Generator().manual_seed(3))
    assert torch.equal(first, sample_tokens(probs, generator=torch.Generator().manual_seed(3)))


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_rows_without_a_finite_positive_total_are_refused(bad):
    probs = torch.tensor([[0.5, 0.5], [bad, 0.5], [0.0, 0.0]])
    with pytest.raises(ValueError, match=r"rows \[1, 2\]"):
        sample_tokens(probs)
