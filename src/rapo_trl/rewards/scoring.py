"""Answer comparison with SQuAD normalisation (numbers kept whole), and reading gold answers from TRL's kwargs."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from rapo_trl.jsonl_qa import number_text
from rapo_trl.rewards.parsing import last_boxed

# Dataset columns that may hold the gold answer(s), in order of preference.
GOLD_COLUMNS = ("answer", "answers", "solution")

_ARTICLES_RE = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
# A whole number: commas only between groups of three digits, so that "2,3" (a list) is two numbers, not 23.
_INTEGER = r"(?:\d{1,3}(?:,\d{3})+|\d+)"
# A number standing on its own: a sign, thousands commas, a decimal part (".5" too: it is 0.5, not 5), a denominator.
_NUMBER_RE = re.compile(rf"(?<![\w.])[-+]?(?:{_INTEGER}(?:\.\d+)?|\.\d+)(?:/{_INTEGER})?(?![\w]|\.\d)")
# Other spellings of a number's marks, as math-verify reads them (rapo eval's math scoring): the Unicode minus sign, and
# LaTeX's thousands comma without the space after it ("1{,}250", "1,\\!250").
_NUMBER_MARKS = (("\u2212", "-"), ("{,}", ","), (",\\!", ","))


def _plain_marks(text: str) -> str:
    for spelling, mark in _NUMBER_MARKS:
        text = text.replace(spelling, mark)
    return text


def plain_number(text: str) -> Decimal | None:
    """The value of ``text`` when it is one plain number (``1,250``, ``-3``, ``12.50``, a closing ``.`` allowed),
    else None."""
    text = _plain_marks(str(text)).strip().rstrip(".")
    if "/" in text or not _NUMBER_RE.fullmatch(text):
        return None
    try:
        value = Decimal(text.replace(",", ""))
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


def is_number(text: str) -> bool:
    """Whether ``text`` is one number: ``42``, ``-3``, ``2.5``, ``1,000`` or ``1/2`` (a closing ``.`` allowed)."""
    return _NUMBER_RE.fullmatch(_plain_marks(str(text)).strip().rstrip(".")) is not None


def _canonical_number(match: re.Match) -> str:
    # 18.00 and 18 are one answer, as 2.5 and 25 or -3 and 3 are two: the sign, the decimal point and the fraction
    # bar are kept, which SQuAD's punctuation rule would drop.
    parts = [Decimal(part.replace(",", "")) for part in match.group().split("/")]
    return " " + "/".join("0" if part == 0 else format(part.normalize(), "f") for part in parts) + " "


def normalize_answer(text: str) -> str:
    """SQuAD normalisation (lowercase, drop punctuation and the articles a/an/the, squeeze spaces), with each number
    kept whole and written one way: ``18.00`` -> ``18``, ``1,250`` (LaTeX's ``1{,}250`` too) -> ``1250``, ``-3`` (with
    the Unicode minus sign too), ``2.5`` and ``1/2`` as they are. An answer of articles alone keeps them (``A`` ->
    ``a``)."""
    pieces = []
    last = 0
    text = _plain_marks(str(text))
    for match in _NUMBER_RE.finditer(text):
        pieces.append(text[last:match.start()].lower().translate(_PUNCTUATION))
        pieces.append(_canonical_number(match))
        last = match.end()
    pieces.append(text[last:].lower().translate(_PUNCTUATION))
    words = "".join(pieces)
    # A multiple-choice letter "A" is an article too: dropped, it would leave nothing, and an empty answer would then
    # match it.
    return " ".join(_ARTICLES_RE.sub(" ", words).split() or words.split())


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
    dropped), a worked solution with ``\\boxed{}`` its last boxed value, a number its digits (``number_text``),
    anything else ``str()``."""
    text = number_text(gold)
    if "####" in text:
        return text.rsplit("####", 1)[1].strip().replace(",", "")
    boxed = last_boxed(text)
    return boxed if boxed is not None else text.strip()


def gold_list(gold: Any) -> list[str]:
    """A row's gold answer(s) as a list: a string, a number, a list/tuple of them, or SQuAD's ``answers`` mapping
    (its ``text`` list)."""
    if gold is None:
        return []
    if isinstance(gold, Mapping) and "text" in gold:
        return gold_list(gold["text"])
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
