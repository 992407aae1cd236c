"""Answer-only rewards (no format gate): exact match, token F1, math equivalence and numeric closeness.

Each scores the final boxed answer (``extract_prediction``) of a completion against the row's gold
answer(s), best over golds, with retrieved blocks stripped and tool results ignored; 0.0 when the
completion has no answer.
"""

from __future__ import annotations

import math
import threading
from typing import Any

from rapo_trl.rewards.format import mask_results
from rapo_trl.rewards.parsing import completion_text, extract_prediction, strip_retrieved_blocks
from rapo_trl.rewards.scoring import best_over_golds, exact_match, golds_from_kwargs, plain_number, token_f1


def _predictions(completions) -> list[str | None]:
    return [extract_prediction(mask_results(strip_retrieved_blocks(completion_text(c)))) for c in completions]


def _score_all(metric, completions, kwargs: dict[str, Any]) -> list[float]:
    golds = golds_from_kwargs(kwargs, len(completions))
    return [
        0.0 if p is None else best_over_golds(metric, p, g) for p, g in zip(_predictions(completions), golds)
    ]


def exact_match_reward(prompts=None, completions=None, completion_ids=None, **kwargs: Any) -> list[float]:
    """1.0 when the boxed answer equals a gold answer after normalisation (``normalize_answer``: SQuAD's, numbers
    kept whole), else 0.0."""
    return _score_all(exact_match, completions, kwargs)


def f1_reward(prompts=None, completions=None, completion_ids=None, **kwargs: Any) -> list[float]:
    """Token F1 (``normalize_answer``: SQuAD's normalisation, numbers kept whole) of the boxed answer, best over the
    gold answers."""
    return _score_all(token_f1, completions, kwargs)


def math_equivalent(prediction: str, gold: str) -> float:
    """1.0 when math-verify finds the two answers mathematically equal (``1/2`` = ``0.5``)."""
    from math_verify import parse, verify

    # math-verify's timeouts use SIGALRM, which only the main thread may set.
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    gold_parsed = parse(f"${gold}$", parsing_timeout=timeout)
    pred_parsed = parse(f"${prediction}$", parsing_timeout=timeout)
    if not gold_parsed or not pred_parsed:
        return 0.0
    return float(verify(gold_parsed, pred_parsed, timeout_seconds=timeout))


def math_equivalence_reward(
    prompts=None, completions=None, completion_ids=None, **kwargs: Any
) -> list[float]:
    """1.0 when the boxed answer is mathematically equivalent to a gold answer (math-verify).

    Golds may be plain values, GSM8K solutions (``... #### 42``) or solutions with ``\\boxed{}``.
    """
    return _score_all(math_equivalent, completions, kwargs)


DEFAULT_CLOSENESS_DECADES = 1.0


def _number(text: str) -> float | None:
    """``plain_number`` as a float, or None for no plain number or one beyond a float's range."""
    value = plain_number(text)
    if value is None or not math.isfinite(float(value)):
        return None
    return float(value)


def _check_decades(decades: float) -> None:
    if decades <= 0:
        raise ValueError(f"decades must be positive, got {decades!r}")


def numeric_closeness(prediction: str, gold: str, decades: float = DEFAULT_CLOSENESS_DECADES) -> float:
    """Partial credit for a numeric answer: 1.0 at the gold value, falling linearly with the distance in
    orders of magnitude (``log10(|x| + 1)``) to 0.0 at ``decades`` away. 0.0 when either side is not a
    plain number or the signs differ.

    A dense *training* signal for tasks whose answer is a number: a program with the right structure but
    a slip lands nearer the gold value than one that multiplies where it should divide, so groups with no
    exact answer still rank their rollouts. Score evaluations with exact match, not with this.
    """
    _check_decades(decades)
    predicted, target = _number(prediction), _number(gold)
    if predicted is None or target is None or (predicted < 0) != (target < 0):
        return 0.0
    distance = abs(math.log10(abs(predicted) + 1) - math.log10(abs(target) + 1))
    return max(0.0, 1.0 - distance / decades)


def make_numeric_closeness_reward(decades: float = DEFAULT_CLOSENESS_DECADES, name: str = "numeric_closeness_reward"):
    """A TRL reward function scoring each completion's boxed answer with :func:`numeric_closeness`
    (best over the gold answers; 0.0 without an answer). Pair it with the outcome reward through
    ``reward_funcs=[rapo_outcome_reward, reward]`` and a small weight in ``reward_weights``."""
    _check_decades(decades)

    def reward(prompts=None, completions=None, completion_ids=None, **kwargs: Any) -> list[float]:
        return _score_all(lambda p, g: numeric_closeness(p, g, decades), completions, kwargs)

    reward.__name__ = reward.__qualname__ = name
    reward.__doc__ = f"numeric_closeness of the boxed answer to the gold value (decades={decades})."
    return reward


numeric_closeness_reward = make_numeric_closeness_reward()
