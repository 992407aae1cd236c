"""Answer comparison with SQuAD normalisation, and reading gold answers from TRL's kwargs."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence
from typing import Any

from rapo_trl.rewards.parsing import last_boxed

# Dataset columns that may hold the gold answer(s), in order of preference.
GOLD_COLUMNS = ("answer", "answers", "solution")

_ARTICLES_RE = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lowercase, drop punctuation and the articles a/an/the, squeeze spaces."""
    text = str(text).lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES_RE.sub(" ", text).split())


def token_f1(prediction: str, gold: str) -> float:
    """Token-level F1 of two answers after normalisation (SQuAD's definition)."""
    pred_tokens, gold_tokens = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    common = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred_tokens), common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, gold: str) -> float:
    """1.0 when both answers are equal after normalisation."""
    return float(normalize_answer(prediction) == normalize_answer(gold))


def clean_gold(gold: Any) -> str:
    """One gold answer as a string: a GSM8K solution becomes the number after ``####`` (commas
    dropped), a worked solution with ``\\boxed{}`` its last boxed value, anything else ``str()``."""
    text = str(gold)
    if "####" in text:
        return text.rsplit("####", 1)[1].strip().replace(",", "")
    boxed = last_boxed(text)
    return boxed if boxed is not None else text.strip()


def gold_list(gold: Any) -> list[str]:
    """A row's gold answer(s) as a list: a string, a number or a list/tuple of them."""
    if gold is None:
        return []
    if isinstance(gold, Sequence) and not isinstance(gold, str):
        return [clean_gold(g) for g in gold if g is not None]
    return [clean_gold(gold)]


def golds_from_kwargs(kwargs: dict[str, Any], n: int) -> list[list[str]]:
    """Per-completion gold lists from the dataset columns TRL passes as kwargs."""
    for column in GOLD_COLUMNS:
        if kwargs.get(column) is not None:
            values = kwargs[column]
            if len(values) != n:
                raise ValueError(f"column '{column}' has {len(values)} values for {n} completions")
            return [gold_list(v) for v in values]
    raise ValueError(
        f"no gold answers: the dataset needs one of the columns {', '.join(GOLD_COLUMNS)} "
        f"(got {', '.join(sorted(kwargs)) or 'none'})"
    )


def best_over_golds(metric, prediction: str, golds: list[str]) -> float:
    """The best score of ``metric(prediction, gold)`` over the golds (0.0 with no gold)."""
    return max((metric(prediction, g) for g in golds), default=0.0)
