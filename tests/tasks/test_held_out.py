"""Held-out evaluation questions for your own data: a seeded fraction, and never a training question."""

from __future__ import annotations

import pytest
from datasets import Dataset

from rapo_trl.tasks.held_out import hold_out, without_questions_of


def _rows(n: int, repeat: int = 0) -> Dataset:
    questions = [f"What is {i} + {i}?" for i in range(n)] + ["What is 0 + 0?"] * repeat
    return Dataset.from_dict({"question": questions, "answer": [str(2 * int(q.split()[2])) for q in questions]})


def test_a_seeded_fraction_is_held_out_and_never_trained_on():
    rows = _rows(40, repeat=10)  # one question eleven times: all its copies on one side
    train, held = hold_out(rows, 0.25, seed=0)
    assert not set(train["question"]) & set(held["question"])
    assert len(held) == 13 and set(train["question"]) | set(held["question"]) == set(rows["question"])
    again, _ = hold_out(rows, 0.25, seed=0)
    other, _ = hold_out(rows, 0.25, seed=1)
    assert again["question"] == train["question"] != other["question"]


def test_a_separate_eval_set_removes_its_questions_from_training():
    train = without_questions_of(_rows(10), _rows(3))
    assert sorted(train["question"]) == sorted(f"What is {i} + {i}?" for i in range(3, 10))


@pytest.mark.parametrize("fraction", [0, 1, 1.5])
def test_a_fraction_must_leave_both_sides_rows(fraction):
    with pytest.raises(ValueError, match="fraction"):
        hold_out(_rows(10), fraction, seed=0)
