"""A question's id when its data gives none: a hash of its text. Every path that stores or asks for a question's
trajectories (``to_rapo_rows``, a store built from prompts, from an environment, or grown in training) names it with
this one function, so that a row's id and its stored records' ids are the same string."""

from __future__ import annotations

import hashlib

QUESTION_ID_CHARS = 12


def question_id_of(question: str) -> str:
    """The id of a question given as text (a conversation's text as ``store.steps.prompt_text`` reads it: without
    its system turn): the first hex digits of its SHA-1, the same on every machine and Python run."""
    return hashlib.sha1(question.encode("utf-8")).hexdigest()[:QUESTION_ID_CHARS]
