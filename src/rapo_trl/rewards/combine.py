"""A weighted sum of reward functions as one reward function.

TRL's trainer already takes a list of rewards with ``reward_weights``; this is for the places that
take exactly one reward (the trace store's builder, ``rapo eval``'s single score).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

from rapo_trl.awaiting import resolved


def _name(func: Callable) -> str:
    # Same naming rule as TRL's logs (kept local: importing trl here would cost seconds).
    while isinstance(func, functools.partial):
        func = func.func
    return getattr(func, "__name__", type(func).__name__)


class CombinedReward:
    """``sum(w * f(...))`` over reward functions (``async`` ones awaited, as TRL awaits them); a None (or NaN) from
    any of them gives None."""

    def __init__(self, funcs: Sequence[Callable[..., list]], weights: Sequence[float] | None = None):
        if not funcs:
            raise ValueError("combine_rewards needs at least one reward function")
        weights = [1.0] * len(funcs) if weights is None else list(weights)
        if len(weights) != len(funcs):
            raise ValueError(f"got {len(weights)} weights for {len(funcs)} reward functions")
        self.funcs, self.weights = list(funcs), [float(w) for w in weights]
        self.__name__ = "+".join(_name(f) for f in self.funcs)

    def __call__(
        self, prompts=None, completions=None, completion_ids=None, **kwargs: Any
    ) -> list[float | None]:
        totals: list[float | None] = [0.0] * len(completions)
        for func, weight in zip(self.funcs, self.weights):
            values = resolved(func(prompts=prompts, completions=completions, completion_ids=completion_ids, **kwargs))
            for i, value in enumerate(values):
                if totals[i] is None or value is None or math.isnan(value):
                    totals[i] = None
                else:
                    totals[i] += weight * value
        return totals


def combine_rewards(
    funcs: Sequence[Callable[..., list]], weights: Sequence[float] | None = None
) -> CombinedReward:
    """One reward function returning the weighted sum of ``funcs`` (weights default to 1)."""
    return CombinedReward(funcs, weights)
