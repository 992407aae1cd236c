"""One token per row from the policy's next-token distribution, by inverse-CDF sampling.

``torch.multinomial`` draws one exponential number per vocabulary entry and row (SmolLM2: 49,152 a row): at 16 rows
that was 11% of a CPU decode step in a profile (benchmarks/results/step_notes.md), 21x the running sum and one
uniform number a row that give the same distribution here. The random stream differs from ``multinomial``'s, so a
seed samples other tokens than it did through ``multinomial``; the distribution is the same up to the float32
rounding of the running sum (each entry within ~6e-8 of the exact sum, which torch accumulates in double on the CPU).
"""

from __future__ import annotations

import torch


def sample_tokens(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One index per row of ``probs`` (``(rows, vocab)``, non-negative, each row with a positive finite total; it
    need not be 1), drawn with probability proportional to its entry. Entries of 0 are never drawn.

    Raises ``ValueError`` on a row whose total is not positive and finite (NaN or infinite scores), as
    ``torch.multinomial`` refuses such rows rather than return an arbitrary token."""
    cdf = probs.float().cumsum(dim=-1)
    total = cdf[:, -1:]
    if not bool(torch.isfinite(total).all() and (total > 0).all()):
        bad = (~torch.isfinite(total) | (total <= 0)).squeeze(1).nonzero().squeeze(1).tolist()
        raise ValueError(f"cannot sample rows {bad}: their probabilities are not finite or sum to 0")
    # Uniform in [0, total): the first entry whose running sum exceeds it. An entry of 0 adds nothing to the sum, so
    # the search never stops on it. A float32 uniform is at most 1 - 2^-24, and rounding to nearest never takes
    # total * (1 - 2^-24) up to the total, so the search always ends inside the row.
    uniform = torch.rand(probs.shape[0], 1, device=probs.device, generator=generator) * total
    return torch.searchsorted(cdf, uniform, right=True).squeeze(1)
