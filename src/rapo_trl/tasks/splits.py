"""Seed-independent train/eval assignment, so splits stay disjoint whatever seeds are used."""

from __future__ import annotations

import hashlib

SPLITS = ("train", "eval")
EVAL_BUCKETS = 2  # out of 10: a fifth of all possible questions belong to eval


def stable_hash(text: str) -> str:
    """A short content hash, the same on every machine and Python run."""
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


def split_of(key: str) -> str:
    """The split a question belongs to, decided by its content alone."""
    return "eval" if int(stable_hash(key), 16) % 10 < EVAL_BUCKETS else "train"


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
