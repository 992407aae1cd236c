"""Retrieval that a failing store cannot turn into a failed training step.

A Chroma server restarting, a dropped connection or a timeout makes ``select`` raise; during a rollout
that would end the whole training step. :func:`select_with_retry` retries such errors with backoff,
then gives up on that retrieval (the rollout goes on without it; the caller counts it). Bad input
(``ValueError``), which retrying cannot fix, is given up on at once. A programming error (``AttributeError``,
``TypeError``, ... : a store object that is not a store, a ``select`` with another signature) is raised: going on
without retrieval would turn RAPO into GRPO for the whole run with no error. ``KeyboardInterrupt`` and
``SystemExit`` get through too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from tenacity import (
    Retrying,
    retry_if_exception_type,
    retry_if_not_exception_type,
    stop_after_attempt,
    wait_exponential,
)

logger = logging.getLogger(__name__)

PROGRAMMING_ERRORS = (AttributeError, TypeError, NameError, ImportError, AssertionError, NotImplementedError)
"""Errors of the code around the store, not of the store or its transport: raised, never an outage."""


def clean_text(text: str) -> str:
    """``text`` with lone surrogates (from bytes decoded with ``surrogateescape``) replaced by ``?``:
    they cannot be encoded to UTF-8, so neither embedded nor tokenised."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def select_or_error(store, contexts: Sequence[str], attempts: int = 3, backoff_s: float = 0.5,
                    question_ids: Sequence[str | None] | None = None, **options):
    """``(retrieved, None)`` from ``store.select(contexts, **options)`` (with ``question_ids=`` when given), retried
    ``attempts`` times in all (waiting ``backoff_s``, then twice that, ...) on errors that may pass; ``(None, error)``
    when it still fails (``error`` is ``None`` when no attempt was allowed)."""
    contexts = [clean_text(context) for context in contexts]
    if attempts < 1:  # no attempt allowed: no retrieval
        return None, None
    retrying = Retrying(
        stop=stop_after_attempt(attempts),
        wait=wait_exponential(multiplier=backoff_s, exp_base=2),
        # Exception only: KeyboardInterrupt and SystemExit get through at once. Bad input and programming errors
        # fail the same way again, so they are not retried either.
        retry=retry_if_exception_type(Exception) & retry_if_not_exception_type((ValueError, *PROGRAMMING_ERRORS)),
        sleep=time.sleep,
        reraise=True,  # the store's own error, not tenacity's RetryError, for the callers' messages
    )
    try:
        if question_ids is not None:
            return retrying(store.select, contexts, question_ids=list(question_ids), **options), None
        return retrying(store.select, contexts, **options), None
    except PROGRAMMING_ERRORS:
        raise
    except Exception as error:  # noqa: BLE001 - a store failure must not end the training step
        return None, error


def is_bad_input(error: BaseException) -> bool:
    """An error that retrying cannot fix (the query, not the store, is at fault)."""
    return isinstance(error, ValueError)


def select_with_retry(store, contexts: Sequence[str], attempts: int = 3, backoff_s: float = 0.5,
                      question_ids: Sequence[str | None] | None = None, **options):
    """:func:`select_or_error`'s result, or ``None`` (with a warning) when the store still failed."""
    selected, error = select_or_error(store, contexts, attempts, backoff_s, question_ids, **options)
    if error is None:
        return selected
    if is_bad_input(error):
        logger.warning(
            "Trace store select failed (%s: %s); going on without retrieval.", type(error).__name__, error
        )
    else:
        logger.warning(
            "Trace store select failed %d times (last: %s: %s); going on without retrieval.",
            attempts, type(error).__name__, error,
        )  # fmt: skip
    return None
