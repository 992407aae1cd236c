"""Token- and step-level entropies of the policy (RAPO.md §4)."""

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


def step_entropy(
    entropy_full: list[float], entropy_topk: list[float], estimator: str = "topk", first_tokens: int = 20
) -> float | None:
    """Entropy of one policy step from its tokens' entropies.

    ``"topk"``: mean of the top-k estimator over the step's first ``first_tokens`` tokens (reference
    code). ``"full"``: mean exact entropy over all the step's tokens (paper). ``None`` for an empty step.
    """
    if estimator == "topk":
        values = entropy_topk[:first_tokens]
    elif estimator == "full":
        values = entropy_full
    else:
        raise ValueError(f"Unknown step entropy estimator {estimator!r}; use 'topk' or 'full'.")
    if not values:
        return None
    return float(sum(values) / len(values))
