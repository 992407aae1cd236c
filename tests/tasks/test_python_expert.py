"""The experts' slips: programs that run and print a wrong answer, for both shipped arithmetic tasks."""

from __future__ import annotations

import random

import pytest

from rapo_trl.tasks import load_task
from rapo_trl.tasks.python_expert import wrong_code
from rapo_trl.tasks.trajectory import run_python_locally


@pytest.mark.parametrize("task", ["word_problems", "arithmetic"])
def test_wrong_code_never_crashes_and_is_always_wrong(task):
    rng = random.Random(1)
    for row in load_task(task, "train", n=200, seed=9):
        code = wrong_code(row["code"], row["answer"], rng)
        assert code != row["code"]
        assert run_python_locally(code).strip() != row["answer"]


def test_a_harmless_slip_is_made_to_count():
    # x * 1 == x + 0 ... every operator swap and dropped digit of this program still prints 0
    code = "a = 0\nb = 0\nprint(a * b)"
    assert run_python_locally(wrong_code(code, "0", random.Random(0))).strip() != "0"
