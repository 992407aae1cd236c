"""The ranges RAPOConfig refuses values outside of, checked before TRL or torch is imported.

`RAPOConfig.__post_init__` refuses them too, but only after the seconds of imports that building it costs;
``rapo`` checks the same bounds on the parsed command line first, so ``--retrieve_prob 2`` answers at once.
``tests/cli/test_ranges.py`` holds this table to RAPOConfig's own checks.
"""

from __future__ import annotations

# name: (lowest allowed, highest allowed); None is unbounded.
RAPO_RANGES: dict[str, tuple[float | None, float | None]] = {
    "num_generations": (2, None),
    "max_completion_length": (1, None),
    "num_hybrid_generations": (0, None),
    "retrieve_prob": (0.0, 1.0),
    "retrieve_prob_final": (0.0, 1.0),
    "retrieval_advantage_weight": (0.0, None),
    "importance_shaping_weight": (0.0, None),
    "max_retrieved_tokens": (1, None),
    "signal_loss_patience": (0, None),
    "max_tool_calls": (0, None),
    "max_turn_tokens": (1, None),
    "tool_workers": (1, None),
    "entropy_first_tokens": (1, None),
    "entropy_top_k": (1, None),
    "retrieval_top_k": (1, None),
}


def out_of_range(values: dict) -> str | None:
    """One line naming the first value of ``values`` (field -> value) outside its range, or None."""
    for name, (low, high) in RAPO_RANGES.items():
        value = values.get(name)
        if value is None or isinstance(value, bool):
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue  # a wrong type is the parser's to report
        if (low is not None and number < low) or (high is not None and number > high):
            bounds = f"in [{low}, {high}]" if high is not None else f">= {low}"
            return f"{name} must be {bounds}, got {value}"
    if _exceeds(values, "num_hybrid_generations", "num_generations"):
        return (f"num_hybrid_generations ({values['num_hybrid_generations']}) must be between 0 and "
                f"num_generations ({values['num_generations']})")
    return None


def _exceeds(values: dict, part: str, whole: str) -> bool:
    try:
        return int(values[part]) > int(values[whole])
    except (KeyError, TypeError, ValueError):
        return False
