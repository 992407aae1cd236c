"""Seed-independent train/eval assignment, so splits stay disjoint whatever seeds are used."""

from __future__ import annotations

from rapo_trl.question_ids import short_hash

SPLITS = ("train", "eval")
EVAL_BUCKETS = 2  # out of 10: a fifth of all possible questions belong to eval


def stable_hash(text: str) -> str:
    """A short content hash, the same on every machine and Python run (``question_ids.short_hash``, which a
    question's id is too: one hashing, kept in the module below ``tasks``)."""
    return short_hash(text)


def split_of(key: str) -> str:
    """The split a question belongs to, decided by its content alone."""
    return "eval" if int(stable_hash(key), 16) % 10 < EVAL_BUCKETS else "train"


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
