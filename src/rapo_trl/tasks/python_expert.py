"""The scripted expert of the arithmetic tasks: one ``<python>`` call over named variables, and its slips.

The experts' stores need some wrong trajectories, so the store's reward-based selection matters: with
probability ``error_rate`` the program carries one plausible slip and the (faithfully reported) answer is wrong.
"""

from __future__ import annotations

import random
import re

from rapo_trl.tasks.trajectory import TrajectoryWriter, run_python_locally

_OPERATOR_SLIPS = {" + ": " - ", " - ": " + ", " * ": " + ", " // ": " * "}


def slip(code: str, rng: random.Random) -> str:
    """The same program with one plausible slip: a wrong operator or a dropped digit."""
    *assignments, last = code.split("\n")
    slips = [op for op in _OPERATOR_SLIPS if op in last]
    if slips and rng.random() < 0.5:
        op = rng.choice(slips)
        # Replace one occurrence, chosen at random, not always the first.
        starts = [m.start() for m in re.finditer(re.escape(op), last)]
        at = rng.choice(starts)
        return "\n".join([*assignments, last[:at] + _OPERATOR_SLIPS[op] + last[at + len(op) :]])
    i = rng.randrange(len(assignments))
    name, value = assignments[i].split(" = ")
    cut = rng.randrange(len(value))
    # int() drops a leading zero the cut may expose; "or 1" keeps divisors non-zero.
    assignments[i] = f"{name} = {int(value[:cut] + value[cut + 1 :] or 0) or 1}"
    return "\n".join([*assignments, last])


def wrong_code(code: str, answer: str, rng: random.Random) -> str:
    """A slipped program that runs and prints something other than ``answer``."""
    for _ in range(8):
        candidate = slip(code, rng)
        try:
            if run_python_locally(candidate).strip() != answer:
                return candidate
        except ArithmeticError:  # a slip made a divisor zero
            continue
    return code[: -len(")")] + " + 1)"  # every slip was harmless; make one that counts


def drawn_program(question_row: dict, error_rate: float, rng: random.Random | None) -> tuple[random.Random, str]:
    """``(rng, program)``: the row's ``code``, slipped with probability ``error_rate``, and the generator the rest of
    the trajectory draws from (seeded by the question id unless given). Every expert draws the slip first, so a
    question slips the same way whichever expert writes it."""
    rng = rng or random.Random(question_row["question_id"])
    code = question_row["code"]
    if rng.random() < error_rate:
        code = wrong_code(code, str(question_row["answer"]), rng)
    return rng, code


def python_expert(question_row: dict, plans: list[str], error_rate: float = 0.0, rng: random.Random | None = None,
                  tools=None) -> str:
    """A tagged trajectory for a row with a ``code`` column: a plan from ``plans``, the program (slipped with
    probability ``error_rate``) and its real output, a closing thought, the ``\\boxed{}`` answer.

    ``rng`` defaults to one seeded by the question id; ``tools`` may map ``"python"`` to the real
    ``PythonTool`` so the result block is exactly what it prints.
    """
    rng, code = drawn_program(question_row, error_rate, rng)
    writer = TrajectoryWriter(tools, {"python": run_python_locally})
    writer.think(rng.choice(plans))
    output = writer.call("python", code)
    value = output.strip().splitlines()[-1] if output.strip() else ""
    writer.think(f"The program printed {value}, which answers the question.")
    writer.answer(f"\\boxed{{{value}}}")
    return writer.text()
