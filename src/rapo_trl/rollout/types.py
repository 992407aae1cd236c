"""What a generation backend returns for one row and one turn; the rows the engine builds from it live in
``core/rows.py``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

FinishReason = Literal["stop", "eos", "length"]


@dataclass
class TurnOutput:
    """What a generation backend returns for one row and one turn.

    ``token_ids`` are the sampled ids, cut just after the stop string's last token or the EOS token.
    Entropies are per sampled token, from the policy's raw distribution (before temperature/top-p):
    ``entropy_full`` in nats over the whole vocabulary, ``entropy_topk`` the top-k estimator of the
    reference code (``-sum p log p`` over the k most likely tokens, divided by ``log |V|``).
    """

    token_ids: list[int]
    finish: FinishReason
    stop_string: str | None = None
    logprobs: list[float] | None = None
    entropy_full: list[float] = field(default_factory=list)
    entropy_topk: list[float] = field(default_factory=list)
