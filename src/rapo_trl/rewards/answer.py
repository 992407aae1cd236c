"""Answer-only rewards (no format gate): exact match, token F1 and math equivalence.

Each scores the final boxed answer (``extract_prediction``) of a completion against the row's gold
answer(s), best over golds, with retrieved blocks stripped and tool results ignored; 0.0 when the
completion has no answer.
"""

from __future__ import annotations

import threading
from typing import Any

from rapo_trl.rewards.format import mask_results
from rapo_trl.rewards.parsing import completion_text, extract_prediction, strip_retrieved_blocks
from rapo_trl.rewards.scoring import best_over_golds, exact_match, golds_from_kwargs, token_f1


def _predictions(completions) -> list[str | None]:
    return [extract_prediction(mask_results(strip_retrieved_blocks(completion_text(c)))) for c in completions]


def _score_all(metric, completions, kwargs: dict[str, Any]) -> list[float]:
    golds = golds_from_kwargs(kwargs, len(completions))
    return [
        0.0 if p is None else best_over_golds(metric, p, g) for p, g in zip(_predictions(completions), golds)
    ]


def exact_match_reward(prompts=None, completions=None, completion_ids=None, **kwargs: Any) -> list[float]:
    """1.0 when the boxed answer equals a gold answer after SQuAD normalisation, else 0.0."""
    return _score_all(exact_match, completions, kwargs)


def f1_reward(prompts=None, completions=None, completion_ids=None, **kwargs: Any) -> list[float]:
    """Token F1 (SQuAD normalisation) of the boxed answer, best over the gold answers."""
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
