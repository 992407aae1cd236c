"""The ranges of RAPO's numeric settings, in one table, with no import beyond the standard library.

``RAPOConfig.__post_init__`` and ``RolloutConfig.__post_init__`` refuse values outside them, and ``rapo`` checks the
parsed command line against the same table before TRL or torch is imported, so ``--retrieve_prob 2`` answers at once.
"""

from __future__ import annotations

import math

# name: (lowest allowed, highest allowed, why the bound, if it needs saying); None is unbounded.
RAPO_RANGES: dict[str, tuple[float | None, float | None, str | None]] = {
    "learning_rate": (0.0, None, None),
    "temperature": (0.0, None, "GRPO compares sampled completions: at 0 every row of a group is the same"),
    "num_generations": (2, None, "GRPO compares each completion with its group"),
    "max_completion_length": (1, None, None),
    "num_hybrid_generations": (0, None, None),
    "retrieve_prob": (0.0, 1.0, None),
    "retrieve_prob_final": (0.0, 1.0, "or None: constant p"),
    "retrieval_advantage_weight": (0.0, None, None),
    "importance_shaping_weight": (0.0, None, None),
    "retrieved_token_loss_weight": (0.0, None, None),
    "max_retrieved_tokens": (1, None, "or None: no cap"),
    "signal_loss_patience": (0, None, "0: never warn"),
    "max_tool_calls": (0, None, "0: no tool calls"),
    "max_turn_tokens": (1, None, None),
    "tool_workers": (1, None, None),
    "json_tool_timeout": (0.0, None, "or None: no timeout, on the trainer's thread"),
    "max_tool_result_chars": (1, None, "or None: shown whole"),
    "step_entropy_first_tokens": (1, None, None),
    "step_entropy_top_k": (1, None, None),
    "dynamic_sampling_max_rounds": (0, None, "0: off"),
    "store_outage_max_steps": (1, None, "or None: train on as GRPO while the store is down"),
}


# Fields whose lowest value is itself refused.
ABOVE_LOWEST: frozenset[str] = frozenset({"temperature", "json_tool_timeout"})


def out_of_range(values: dict, unbounded: tuple[str, ...] = ()) -> str | None:
    """One line naming the first value of ``values`` (field -> value) outside its range, or None. Fields the table
    does not hold or ``unbounded`` names, ``None`` and values that are no number are left alone."""
    for name, (low, high, why) in RAPO_RANGES.items():
        value = None if name in unbounded else values.get(name)
        if value is None or isinstance(value, bool):
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue  # a wrong type is the parser's to report
        if math.isnan(number):  # NaN compares false with every bound: `--retrieve_prob nan` would never retrieve
            return f"{name} must be a number, got {value}"
        above_lowest = name in ABOVE_LOWEST
        below = low is not None and (number <= low if above_lowest else number < low)
        if below or (high is not None and number > high):
            bounds = f"in [{low}, {high}]" if high is not None else f"{'>' if above_lowest else '>='} {low}"
            return f"{name} must be {bounds}{f' ({why})' if why else ''}, got {value}"
    if _exceeds(values, "num_hybrid_generations", "num_generations"):
        return (f"num_hybrid_generations ({values['num_hybrid_generations']}) must be between 0 and "
                f"num_generations ({values['num_generations']})")
    return None


def _exceeds(values: dict, part: str, whole: str) -> bool:
    try:
        return int(values[part]) > int(values[whole])
    except (KeyError, TypeError, ValueError):
        return False


def check_ranges(values: dict, unbounded: tuple[str, ...] = ()) -> None:
    """Raise ``ValueError`` naming the first value of ``values`` outside its range (``out_of_range``)."""
    problem = out_of_range(values, unbounded)
    if problem is not None:
        raise ValueError(problem + ".")
