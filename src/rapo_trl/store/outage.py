"""Retrieval through a store that may go away for a while (a ``chroma run`` server killed and restarted).

While the store answers, a failed ``select`` is retried with backoff (``select_or_error``). Once it has kept
failing, an outage begins: one warning says so, and from then on each retrieval makes a single attempt (no
backoff waits), so a down store costs a rollout almost nothing. The rows that would have retrieved go on
on-policy: no retrieved step and no fallback text, since the fallback text is the paper's answer to a store that
had nothing good for this context, which a store that could not be asked did not say. The first answer ends the
outage (one info line), with no restart of training.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from rapo_trl.store.retry import is_bad_input, select_or_error

logger = logging.getLogger("rapo_trl.store")


class StoreOutage:
    """Retrieval with the outage rule above, and what the trainer reports about it.

    Args:
        attempts: tries per retrieval while the store is up (the first counts).
        backoff_s: the first wait between tries; each next one is twice as long.
    """

    def __init__(self, attempts: int = 3, backoff_s: float = 0.5):
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.down_since: float | None = None
        """``time.monotonic()`` when the current outage began; ``None`` while the store answers."""
        self.given_up = 0
        """Retrievals (one per row) given up because the store failed, over the run."""
        self.given_up_in_outage = 0
        self.outages = 0
        """Outages begun so far."""
        self.last_error = ""
        self.growth_lost = 0
        """Trajectories that store growth could not add (the store failed), over the run."""
        self.steps_down = 0
        """Consecutive training steps that ended with the store down (see :meth:`step_ended`)."""

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def select(self, store, contexts: Sequence[str], question_ids=None, **options):
        """``store.select(contexts, **options)`` for these rows, or ``None`` when the store failed (the rows go on
        without retrieval)."""
        selected, error = select_or_error(store, contexts, 1 if self.down else self.attempts, self.backoff_s,
                                          question_ids, **options)
        if error is None:
            if self.down and selected is not None:
                self._recovered(store)
            return selected
        self.given_up += len(contexts)
        if is_bad_input(error):  # the query is at fault, not the store: no outage
            logger.warning("RAPO: trace store select failed (%s: %s); these rows go on without retrieval.",
                           type(error).__name__, error)
            return None
        self.given_up_in_outage += len(contexts)
        self.last_error = f"{type(error).__name__}: {error}"
        if not self.down:
            self.down_since = time.monotonic()
            self.outages += 1
            logger.warning(
                "RAPO: the trace store at %s is unreachable (%d tries, last: %s). Rollouts go on without retrieval "
                "(on-policy: no retrieved step, no fallback text), each such row counted in rapo/store_errors; "
                "retrieval resumes by itself when the store answers again. Said once per outage.",
                _where(store), self.attempts, self.last_error)  # fmt: skip
        return None

    def _recovered(self, store) -> None:
        logger.info("RAPO: the trace store at %s answers again after %.0f s; %d retrievals were skipped meanwhile.",
                    _where(store), time.monotonic() - self.down_since, self.given_up_in_outage)
        self.down_since = None
        self.given_up_in_outage = 0
        self.steps_down = 0

    def step_ended(self) -> int:
        """Count a training step that ended with the store down; returns the consecutive count."""
        self.steps_down = self.steps_down + 1 if self.down else 0
        return self.steps_down

    def describe(self) -> str:
        """How long the current outage has lasted, for the trainer's warnings."""
        if not self.down:
            return "the trace store answers"
        return (f"the trace store has been unreachable for {self.steps_down} step(s), {time.monotonic() - self.down_since:.0f} s "
                f"({self.given_up_in_outage} retrievals skipped; last error: {self.last_error})")


def _where(store) -> str:
    return str(getattr(store, "location", None) or type(store).__name__)
