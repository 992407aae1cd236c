"""Question/answer rows from a JSONL file, read with the standard library alone.

``rapo`` checks a user's file with it before torch, ``datasets`` or TRL load (a mistake answers in a fraction of
a second), and `rapo_trl.tasks.load_jsonl_qa` reads the same rows from it: one reader, one set of messages.
Each message names the file and the line (the file's line, not the line inside one JSON value).
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from pathlib import Path


def is_blank_answer(answer) -> bool:
    """No gold answer: null, NaN, an empty list, or a string of nothing but whitespace. A blank string would not score
    0: it normalises to the empty answer, which an empty ``\\boxed{}`` matches exactly. NaN is how pandas writes a
    missing value (``json.dumps`` keeps it, a float column holds it), and no answer matches it."""
    return (answer is None or answer == [] or (isinstance(answer, str) and not answer.strip())
            or (isinstance(answer, float) and math.isnan(answer)))


def read_qa_jsonl(path: str | Path, question_key: str = "question", answer_key: str = "answer",
                  n: int | None = None) -> list[dict]:
    """Each object of the file (the first ``n``), its question and answer keys named ``question`` and ``answer`` and its
    other keys kept (they are columns a reward reads, as ``load_dataset("json")`` keeps them); a malformed line, a
    missing key, an empty question or a blank answer raises ``ValueError`` naming ``path:line``."""
    rows = []
    with open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, 1):
            if n is not None and len(rows) >= n:
                break
            if not line.strip():
                continue
            where = f"{path}:{line_no}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:  # its own "line 1" is the line inside this one JSON value
                raise ValueError(f"{where}: not JSON ({error.msg}, column {error.colno}); a JSONL file holds one "
                                 "JSON object a line") from None
            if not isinstance(record, dict):
                raise ValueError(f"{where}: a JSON {type(record).__name__} where an object "
                                 f"({{\"{question_key}\": ..., \"{answer_key}\": ...}}) was expected")
            missing = [key for key in (question_key, answer_key) if key not in record]
            if missing:
                raise ValueError(f"{where}: no key {', '.join(map(repr, missing))}; keys are {', '.join(record)}")
            question, answer = record[question_key], record[answer_key]
            if not isinstance(question, str) or not question.strip():
                raise ValueError(f"{where}: '{question_key}' must be a non-empty string, got {question!r}")
            if is_blank_answer(answer):
                raise ValueError(f"{where}: '{answer_key}' is {json.dumps(answer)}; every question needs its answer")
            others = {key: value for key, value in record.items() if key not in (question_key, answer_key)}
            rows.append({**others, "question": question, "answer": answer})
    if not rows:
        raise ValueError(f"{path}: no rows")
    return _answers_of_one_type(rows)


def _answers_of_one_type(rows: list[dict]) -> list[dict]:
    """``rows`` with answers of one type (:func:`answers_of_one_type`)."""
    answers = answers_of_one_type([row["answer"] for row in rows])
    return [{**row, "answer": answer} for row, answer in zip(rows, answers)]


def answers_of_one_type(answers: list) -> list:
    """``answers`` of one type, as a dataset column holds them (Arrow refuses a mix): where some answers are lists of
    golds, every answer is one (``"4"`` -> ``["4"]``); where some are text, numbers are written as text (``12`` beside
    ``"15"``). The rewards score a gold and a list holding it alike, and a number's text by its value."""
    if any(isinstance(answer, list) for answer in answers):
        answers = [answer if isinstance(answer, list) else [answer] for answer in answers]
    if any(isinstance(gold, str) for answer in answers for gold in (answer if isinstance(answer, list) else [answer])):
        answers = [[_as_text(gold) for gold in answer] if isinstance(answer, list) else _as_text(answer)
                   for answer in answers]
    return answers


def _as_text(gold):
    return number_text(gold) if isinstance(gold, (int, float)) and not isinstance(gold, bool) else gold


def number_text(value) -> str:
    """``str(value)``, but a float in digits: Python writes ``0.00001`` as ``1e-05``, which no answer matches as
    text and math-verify does not read as a number."""
    if isinstance(value, float) and math.isfinite(value):
        return format(Decimal(repr(value)), "f")
    return str(value)
