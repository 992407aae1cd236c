"""Plausible mistakes for the scripted experts: a program with one slip that prints a wrong answer.

The experts' stores need some wrong trajectories, so the store's reward-based selection matters.
"""

from __future__ import annotations

import random
import re

from rapo_trl.tasks.trajectory import run_python_locally

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
