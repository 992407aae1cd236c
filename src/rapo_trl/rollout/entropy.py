"""Token- and step-level entropies of the policy (docs/design.md, step entropy)."""

from __future__ import annotations

import math

import torch


def token_entropies(logits: torch.Tensor, top_k: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row entropies of one decoding position from raw logits of shape ``(B, V)``.

    Returns ``(full, topk)``: the exact entropy in nats, and the reference code's estimator: the sum of
    ``-p log p`` over the ``top_k`` most likely tokens (``p`` normalised over the full vocabulary),
    divided by ``log V`` so it lies in ``[0, 1]``.
    """
    logp = torch.log_softmax(logits.float(), dim=-1)
    p = logp.exp()
    # Masked logits (-inf) give 0 * -inf = nan; such tokens contribute nothing.
    plogp = torch.where(p > 0, p * logp, torch.zeros_like(p))
    full = -plogp.sum(dim=-1)
    top_logp = logp.topk(min(top_k, logp.size(-1)), dim=-1).values
    top_p = top_logp.exp()
    topk = -torch.where(top_p > 0, top_p * top_logp, torch.zeros_like(top_p)).sum(dim=-1)
    return full, topk / math.log(logits.size(-1))


STEP_ENTROPY_ESTIMATORS = ("topk", "topk_mean", "full")
"""Step entropy estimators: the reference code's top-k sum, its per-token mean, the paper's full mean."""


def step_entropy(
    entropy_full: list[float], entropy_topk: list[float], estimator: str = "topk", first_tokens: int = 20
) -> float | None:
    """Entropy of one policy step from its tokens' entropies.

    - ``"topk"`` (reference code): the **sum** of the per-token top-k estimator over the step's first
      ``first_tokens`` tokens, so a step shorter than ``first_tokens`` has a proportionally smaller
      entropy. With token entropy 0.1, a 30-token step gives 2.0 and an 8-token step 0.8.
    - ``"topk_mean"``: the mean of the same values (length-independent; not in the paper or the code).
    - ``"full"`` (paper): mean exact entropy over all the step's tokens.

    ``None`` for an empty step.
    """
    if estimator not in STEP_ENTROPY_ESTIMATORS:
        raise ValueError(f"Unknown step entropy estimator {estimator!r}; use one of {STEP_ENTROPY_ESTIMATORS}.")
    values = entropy_full if estimator == "full" else entropy_topk[:first_tokens]
    if not values:
        return None
    if estimator == "topk":
        return float(sum(values))
    return float(sum(values) / len(values))
