"""A question's id when its data gives none: a hash of its text. Every path that stores or asks for a question's
trajectories (``to_rapo_rows``, a store built from prompts, from an environment, or grown in training) names it with
this one function, so that a row's id and its stored records' ids are the same string."""

from __future__ import annotations

import hashlib

QUESTION_ID_CHARS = 12


def short_hash(text: str) -> str:
    """The first ``QUESTION_ID_CHARS`` hex digits of ``text``'s SHA-1, the same on every machine and Python run: a
    question's id here, and the key ``tasks.splits`` assigns splits and names the demo tasks' questions by. Stores,
    datasets and run records hold these strings, so the function must never change."""
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:QUESTION_ID_CHARS]


def question_id_of(question: str) -> str:
    """The id of a question given as text (a conversation's text as ``store.steps.prompt_text`` reads it: without
    its system turn): its ``short_hash``."""
    return short_hash(question)
