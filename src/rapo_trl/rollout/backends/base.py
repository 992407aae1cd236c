"""The backend protocol and the cut rule shared by every backend."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from rapo_trl.rollout.types import TurnOutput


@dataclass
class SamplingSettings:
    """How tokens are sampled (the same knobs as TRL's GRPOConfig)."""

    temperature: float = 1.0
    """Sampling temperature."""
    top_p: float = 1.0
    """Nucleus sampling mass."""
    top_k: int = 0
    """Keep only the k most likely tokens (0: off)."""
    min_p: float | None = None
    """Minimum token probability relative to the most likely one."""
    repetition_penalty: float = 1.0
    """Penalty for repeated tokens (1.0: off)."""
    do_sample: bool = True
    """Sample (True) or decode greedily (False)."""
    entropy_top_k: int = 10
    """How many log-probs per token the top-k entropy estimator uses."""
    extra: dict = field(default_factory=dict)
    """Further generation options (``generation_kwargs`` beyond the fields above), passed as they are to
    transformers' ``GenerationConfig`` or vLLM's ``SamplingParams``, as TRL does."""


class GenerationBackend(Protocol):
    """Generates one turn for a batch of token-id sequences.

    A backend may also define ``begin_rollout()`` and ``end_rollout()``: the engine calls them around each
    rollout, so state kept between turns (the transformers backend's KV caches) never outlives the weights
    it was computed with.
    """

    def generate(
        self, sequences: Sequence[Sequence[int]], max_new_tokens: Sequence[int], stop_strings: Sequence[str]
    ) -> list[TurnOutput]:
        """Continue each sequence by at most its ``max_new_tokens``; stop after a stop string or EOS."""
        ...


def find_stop(tokenizer, token_ids: Sequence[int], stop_strings: Sequence[str], eos_ids: set[int]):
    """Where a turn ends: ``(length, finish, stop_string)``.

    The cut is just after the first token at which a stop string is complete, or just after the first
    EOS token, whichever comes first; otherwise the whole output stands (``"length"``). A stop string's
    presence in a decoded prefix is monotone in the prefix length, so a binary search needs only
    ``O(log n)`` decodes.
    """
    eos_at = next((i for i, t in enumerate(token_ids) if t in eos_ids), None)
    limit = len(token_ids) if eos_at is None else eos_at  # a stop string must end before the EOS

    def first_stop(text: str) -> str | None:
        hits = [(text.find(s), s) for s in stop_strings if s in text]
        return min(hits)[1] if hits else None

    stop_at, stop = None, None
    if stop_strings and limit > 0:
        stop = first_stop(tokenizer.decode(token_ids[:limit], skip_special_tokens=False))
        if stop is not None:
            lo, hi = 1, limit
            while lo < hi:
                mid = (lo + hi) // 2
                if first_stop(tokenizer.decode(token_ids[:mid], skip_special_tokens=False)) is not None:
                    hi = mid
                else:
                    lo = mid + 1
            stop_at = lo
            stop = first_stop(tokenizer.decode(token_ids[:stop_at], skip_special_tokens=False))
    if stop_at is not None:
        return stop_at, "stop", stop
    if eos_at is not None:
        return eos_at + 1, "eos", None
    return len(token_ids), "length", None
