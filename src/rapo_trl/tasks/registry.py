"""The shipped demo tasks by name: their data, scripted expert, corpus and the tools they need."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from datasets import Dataset

from rapo_trl.tasks import arithmetic, two_hop, word_problems


@dataclass(frozen=True)
class Task:
    """A demo task. ``load(split, n, seed)`` gives raw rows (question, answer, question_id, ...);
    ``expert(row, error_rate, rng, tools)`` writes a tagged trajectory; ``corpus()`` the passages its
    search tool indexes (None when the task needs no search); ``options`` the extra keyword
    arguments its ``load`` takes (e.g. ``difficulty``)."""

    name: str
    load: Callable[..., Dataset]
    expert: Callable[..., str]
    tools: tuple[str, ...]
    corpus: Callable[[], Dataset] | None = None
    options: tuple[str, ...] = ()


TASKS: dict[str, Task] = {
    "arithmetic": Task("arithmetic", arithmetic.load, arithmetic.expert, ("python",)),
    "two_hop": Task("two_hop", two_hop.load, two_hop.expert, ("search", "python"), two_hop.corpus),
    "word_problems": Task(
        "word_problems", word_problems.load, word_problems.expert, ("python",),
        options=("difficulty", "digits", "tool_steps"),
    ),
}


def get_task(name: str) -> Task:
    """The demo task called ``name``."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; choose one of {', '.join(TASKS)}")
    return TASKS[name]


def load_task(name: str, split: str = "train", n: int | None = None, seed: int = 0, **options) -> Dataset:
    """``n`` rows of a demo task's ``split`` ("train" or "eval"; disjoint), generated from ``seed``;
    ``options`` are the task's own knobs (``word_problems``: ``difficulty``, ``digits``, ``tool_steps``)."""
    task = get_task(name)
    unknown = sorted(set(options) - set(task.options))
    if unknown:
        takes = ", ".join(task.options) or "none"
        raise ValueError(f"task {name!r} has no option {', '.join(unknown)} (its options: {takes})")
    return task.load(split=split, n=n, seed=seed, **options)


def load_corpus(name: str) -> Dataset:
    """A demo task's search corpus (columns title, text)."""
    task = get_task(name)
    if task.corpus is None:
        raise ValueError(f"task {name!r} has no search corpus")
    return task.corpus()
