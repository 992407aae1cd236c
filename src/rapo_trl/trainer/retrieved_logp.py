"""How likely the policy finds the stored steps it was shown: ``rapo/retrieved_token_logp``, the mean log-probability
of the retrieved steps' own tokens under the current policy (docs/metrics.md).

The loss's forward already scores every completion token, retrieved ones included (their loss mask is 0), so the
metric costs a masked mean: the scored batch carries a mask of those tokens (``RETRIEVED_TOKENS_KEY``), which TRL
splits and shuffles with the rest, and each loss micro-batch logs its tokens' mean. Rising, it says the policy is
learning to write the stored step itself (``retrieved_token_loss_weight``); at weight 0 it shows how far the stored
steps stay from what the policy would write.
"""

from __future__ import annotations

import torch

from rapo_trl.core.objective import retrieved_token_mask

RETRIEVED_TOKENS_KEY = "rapo_retrieved_tokens"
"""1 on the retrieved steps' own tokens of every row of the scored batch ([B, T_completion])."""
METRIC = "rapo/retrieved_token_logp"


def retrieved_tokens(rows, completion_mask: torch.Tensor) -> torch.Tensor:
    """The batch field: the retrieved steps' own tokens of ``rows``, less the rows TRL masks out of the loss."""
    return retrieved_token_mask(rows, completion_mask.size(1), completion_mask.device) * completion_mask


def retrieved_token_logp(per_token_logps: torch.Tensor, tokens: torch.Tensor, accelerator) -> float | None:
    """The mean log-probability of ``tokens`` over every process's micro-batch; ``None`` where none has any. Every
    process calls it (it gathers)."""
    shown = tokens.bool()
    stats = torch.stack([per_token_logps.detach().float().masked_fill(~shown, 0.0).sum(), shown.float().sum()])
    total, count = accelerator.gather(stats.unsqueeze(0)).sum(dim=0).tolist()
    return total / count if count else None
