"""Retrieval in a rollout: at the step boundaries a turn reached, draw which hybrid rows retrieve (the rule:
``rapo_trl.core.retrieval_rule``), ask the store for each one's step, and append it as forced tokens with its
``RetrievalEvent``.

A query is the row's question and its completion as a store key reads; a start or plan retrieval asks with the
question alone. A failing store is retried, then the rows go on without retrieval (``rapo_trl.store.outage``). A block
that does not fit is skipped, never cut. With ``retrieved_step_as_own`` a stored step is inserted as the policy's own
step (no preface, no tags), and one that closes the answer ends its row as the policy's own answer would.
"""

from __future__ import annotations

import inspect
import logging
import random
from typing import Any, Protocol

from rapo_trl.core.retrieval_rule import rows_that_retrieve
from rapo_trl.core.rows import RetrievalEvent, RolloutRow
from rapo_trl.protocol import OWN_STEP_TEMPLATE, encode_retrieved_block, step_own_text
from rapo_trl.rollout.config import RolloutConfig
from rapo_trl.rollout.sequence import append_forced, close_episode
from rapo_trl.store.outage import StoreOutage

logger = logging.getLogger(__name__)

FIRST_STEP_BOUNDARIES = ("start", "plan")
"""Boundaries where a row asks for its first step: queried with the question alone."""


class StepSelector(Protocol):
    """What the engine needs from a trace store: batched selection for many contexts at once. A store whose
    ``select`` also takes ``question_ids`` (one per context, ``None`` for none) may prefer each row's own
    question's records (``RolloutConfig.retrieve_own_question``)."""

    def select(self, contexts: list[str]) -> list[Any]: ...


def select_takes(store, name: str) -> bool:
    """Whether ``store.select`` accepts the keyword ``name`` (``TraceStore`` takes ``question_ids``, ``top_k``,
    ``min_reward`` and ``fallback_text``; a custom store may take none)."""
    try:
        return name in inspect.signature(store.select).parameters
    except (TypeError, ValueError):  # no signature to read (a builtin, a C extension)
        return False


def takes_question_ids(store) -> bool:
    """Whether ``store.select`` accepts a ``question_ids`` argument (``TraceStore`` does; a custom store may not)."""
    return select_takes(store, "question_ids")


class StepRetrieval:
    """The engine's retrieval: its store, the seeded generator the draws come from, and the store's health.

    Args:
        store: anything with ``select(contexts) -> list[Retrieved]`` (e.g. ``TraceStore``); ``None``: no retrieval.
        tokenizer: the policy's tokenizer (blocks are encoded, completions decoded for queries).
        config: the engine's budgets and templates.
        seed: seeds the draws.
    """

    def __init__(self, store: StepSelector | None, tokenizer, config: RolloutConfig, seed: int | None):
        self.store = store
        self.tokenizer = tokenizer
        self.config = config
        self.rng = random.Random(seed)
        self.outage = StoreOutage()
        """The store's health as rollouts found it: retries, one warning per outage, rows given up."""
        self._warned_question_ids = False

    def retrieve(self, rows: list[RolloutRow], boundaries: dict[int, str], prefixes: list[str],
                 question_ids: list[str | None], retrieve_prob: float) -> None:
        """Draw a retrieval for each hybrid row at a step boundary (``boundaries``: row -> which boundary); a row with
        a question id asks for its own question's records (``retrieve_own_question``)."""
        chosen = rows_that_retrieve(boundaries, rows, self.rng, retrieve_prob)
        if not chosen:
            return
        # A start or plan retrieval asks for the row's first step: stored first steps are keyed by the context before
        # them (the question), so it queries with that. With the plan in the query, the nearest keys are those of
        # second steps (question + first step), i.e. another question's answer step.
        contexts = [prefixes[i] if boundaries[i] in FIRST_STEP_BOUNDARIES else prefixes[i] + self._context_text(rows[i])
                    for i in chosen]
        # A failing store (server down, timeout) is retried with backoff, then these rows go on without retrieval
        # (counted per row as rapo/store_errors); during an outage one try each, and one warning in all.
        asked = self._asked_ids([question_ids[i] for i in chosen])
        selected = self.outage.select(self.store, contexts, question_ids=asked)
        if selected is None:
            return
        selected = list(selected)
        self._check_one_per_context(selected, contexts)
        for i, found in zip(chosen, selected):
            self._insert(rows[i], found, boundaries[i])

    def _check_one_per_context(self, selected: list, contexts: list[str]) -> None:
        """Raises unless the store answered every context: answers are paired with rows in order, so one left out
        would splice the next row's step into this row."""
        if len(selected) != len(contexts):
            raise ValueError(f"{type(self.store).__name__}.select returned {len(selected)} results for "
                             f"{len(contexts)} contexts; it must return one per context, in order (the fallback "
                             "text where it finds nothing).")

    def _asked_ids(self, own: list[str | None]) -> list[str | None] | None:
        """The question ids to ask the store with: ``None`` when no row has one or the store takes none."""
        if not any(q is not None for q in own):
            return None
        if not takes_question_ids(self.store):
            if not self._warned_question_ids:
                logger.warning("retrieve_own_question: %s.select takes no question_ids; retrieving by similarity "
                               "alone.", type(self.store).__name__)
                self._warned_question_ids = True
            return None
        return own

    def _context_text(self, row: RolloutRow) -> str:
        """The row's completion as a store key reads: an earlier retrieved block stands as the stored step's own text
        (a key is an agent's context, which never holds the preface or ``<retrieve>`` tags); a fallback, as nothing."""
        parts, at = [], 0
        for event in row.retrievals:
            parts += [self.tokenizer.decode(row.completion_ids[at:event.start], skip_special_tokens=True),
                      event.text or ""]
            at = event.end
        parts.append(self.tokenizer.decode(row.completion_ids[at:], skip_special_tokens=True))
        return "".join(parts)

    def _insert(self, row: RolloutRow, found, boundary: str) -> None:
        """Append the step the store found as forced tokens and record it on the row."""
        cfg = self.config
        is_fallback = bool(getattr(found, "is_fallback", False))
        # The fallback text is the environment's note, not a step the policy could have written: always a block.
        as_own = cfg.retrieved_step_as_own and not is_fallback
        template = OWN_STEP_TEMPLATE if as_own else cfg.retrieve_template
        ids, step_span = encode_retrieved_block(self.tokenizer, found.text, template, cfg.result_template)
        # Never cut a retrieved step or end a row because of one (docs/design.md): a block that does not
        # leave the policy room to continue, or exceeds the cap, is skipped and counted.
        room = cfg.max_completion_length - len(row.completion_ids)
        if len(ids) >= room or (cfg.max_retrieved_tokens is not None and len(ids) > cfg.max_retrieved_tokens):
            row.skipped_retrievals += 1
            return
        start, end = append_forced(row, ids, "retrieved", cfg.max_completion_length)
        steps = row.policy_steps
        row.retrievals.append(
            RetrievalEvent(
                after_step=len(steps) - 1,
                start=start,
                end=end,
                is_fallback=is_fallback,
                record_id=getattr(found, "record_id", None),
                reward=getattr(found, "reward", None),
                similarity=getattr(found, "similarity", None),
                entropy_pre=steps[-1].entropy if steps else None,  # at the start no step comes before it
                boundary=boundary,
                step_tokens=None if is_fallback or step_span is None else (start + step_span[0], start + step_span[1]),
                text=None if is_fallback else found.text,
                question_id=getattr(found, "question_id", None),
                as_own=as_own,
            )
        )
        if as_own and self._closes_answer(found.text):
            # A turn of the policy's own that closes the answer ends its row (``answer_stop``); so does this one.
            row.finished = True
            close_episode(row, self.tokenizer.eos_token_id, cfg.max_completion_length)

    def _closes_answer(self, text: str) -> bool:
        """Whether a stored step closes the answer in its own text: a tool's output (code printing the tag, a search
        hit quoting it) is no answer of the agent's, as the policy's turn is read only up to its tool call."""
        cfg = self.config
        return bool(cfg.answer_stop) and cfg.answer_stop in step_own_text(text, cfg.result_template)
