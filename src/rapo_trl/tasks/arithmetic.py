"""Demo task ``arithmetic``: short word problems over 4-7 digit numbers, solved with ``<python>``.

Each row carries the program that solves it (``code``); the gold answer is what that program prints.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from datasets import Dataset

from rapo_trl.tasks.python_expert import python_expert
from rapo_trl.tasks.splits import check_split, split_of, stable_hash
from rapo_trl.tasks.trajectory import run_python_locally

DEFAULT_SIZES = {"train": 1000, "eval": 200}

_NAMES = [
    "Orla",
    "Tamsin",
    "Idris",
    "Kavi",
    "Noor",
    "Pim",
    "Ruan",
    "Saskia",
    "Teodor",
    "Wren",
    "Yusra",
    "Zeno",
]


@dataclass(frozen=True)
class _Template:
    story: str  # format string over the variable names and {name}
    variables: dict[str, tuple[int, int]]  # name -> inclusive digit-count range
    expression: str  # Python over the variable names, integer-valued

    def sample(self, rng: random.Random) -> tuple[str, str]:
        values = {v: rng.randint(10 ** (lo - 1), 10**hi - 1) for v, (lo, hi) in self.variables.items()}
        question = self.story.format(name=rng.choice(_NAMES), **values)
        code = "".join(f"{v} = {x}\n" for v, x in values.items()) + f"print({self.expression})"
        return question, code


_TEMPLATES = [
    _Template(
        "{name} runs a warehouse that holds {stock} crates. For the next {days} days a truck delivers "
        "{per_day} crates every day. How many crates are in the warehouse after the last delivery?",
        {"stock": (6, 7), "per_day": (4, 5), "days": (2, 2)},
        "stock + per_day * days",
    ),
    _Template(
        "A stadium sold {sat} tickets at {sat_price} coins each on Saturday and {sun} tickets at "
        "{sun_price} coins each on Sunday. How many coins did the tickets bring in altogether?",
        {"sat": (5, 5), "sat_price": (2, 3), "sun": (5, 5), "sun_price": (2, 3)},
        "sat * sat_price + sun * sun_price",
    ),
    _Template(
        "{name}'s orchard picked {spring} apples in spring and {autumn} apples in autumn, then sold "
        "{sold} apples to a juice factory. How many apples are left?",
        {"spring": (6, 7), "autumn": (6, 7), "sold": (5, 6)},
        "spring + autumn - sold",
    ),
    _Template(
        "A printing press prints {per_hour} pages an hour and runs for {hours} hours. How many pages "
        "does it print?",
        {"per_hour": (5, 6), "hours": (3, 3)},
        "per_hour * hours",
    ),
    _Template(
        "A factory makes {per_shift} bolts in each of {shifts} shifts and packs them in boxes of "
        "{box} bolts. How many boxes can it fill completely?",
        {"per_shift": (5, 6), "shifts": (2, 3), "box": (2, 2)},
        "per_shift * shifts // box",
    ),
    _Template(
        "{name}'s library owns {books} books, buys {monthly} more each month for {months} months and "
        "gives away {given} books over that time. How many books does it own at the end?",
        {"books": (6, 6), "monthly": (4, 4), "months": (2, 2), "given": (5, 5)},
        "books + monthly * months - given",
    ),
]


def load(split: str = "train", n: int | None = None, seed: int = 0) -> Dataset:
    """``n`` problems of ``split`` (columns question, answer, question_id, code)."""
    check_split(split)
    n = DEFAULT_SIZES[split] if n is None else n
    rng = random.Random(f"arithmetic:{split}:{seed}")
    rows, seen = [], set()
    while len(rows) < n:
        question, code = rng.choice(_TEMPLATES).sample(rng)
        # Membership is decided by content, so train and eval never share a question.
        if question in seen or split_of(question) != split:
            continue
        seen.add(question)
        answer = run_python_locally(code).strip()
        rows.append(
            {
                "question": question,
                "answer": answer,
                "question_id": f"arithmetic-{stable_hash(question)}",
                "code": code,
            }
        )
    return Dataset.from_list(rows)


_PLANS = [
    "These numbers are too large to multiply and add reliably in my head, so I will let Python do it.",
    "I should turn the story into one expression and compute it with Python.",
    "Let me write down the quantities as variables and evaluate the expression in Python.",
]


def expert(question_row: dict, error_rate: float = 0.0, rng: random.Random | None = None, tools=None) -> str:
    """A correct tagged trajectory for an ``arithmetic`` row; with probability ``error_rate`` one
    whose code has a slip, so its (faithfully reported) answer is wrong.

    ``rng`` defaults to one seeded by the question id; ``tools`` may map ``"python"`` to the real
    ``PythonTool`` so the result block is exactly what it prints.
    """
    return python_expert(question_row, _PLANS, error_rate, rng, tools)
