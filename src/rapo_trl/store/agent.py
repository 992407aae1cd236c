"""Building a store from an off-policy agent: sample N trajectories per question, score them with
the reward function, keep the top K per question, store their steps. Questions already in the store
(from the same source) are skipped, so a killed build resumes where it stopped."""

from __future__ import annotations

import hashlib
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from rapo_trl.awaiting import resolved
from rapo_trl.question_ids import question_id_of
from rapo_trl.store.steps import prompt_text

logger = logging.getLogger(__name__)


@runtime_checkable
class TrajectorySampler(Protocol):
    """An agent that samples tagged trajectories in batches (e.g. a vLLM-backed policy with tools).

    ``sample_trajectories(prompts, num_samples)`` returns, for each prompt, ``num_samples`` texts.
    """

    def sample_trajectories(self, prompts: list, num_samples: int) -> list[list[str]]: ...


def sample(agent, prompts: list, num_samples: int) -> list[list[str]]:
    """``num_samples`` trajectories per prompt from a :class:`TrajectorySampler` or a plain
    ``agent(prompt) -> str`` callable (called once per sample)."""
    if isinstance(agent, TrajectorySampler):
        samples = agent.sample_trajectories(prompts, num_samples)
        if len(samples) != len(prompts) or any(len(group) != num_samples for group in samples):
            raise ValueError(
                f"{type(agent).__name__}.sample_trajectories returned {[len(g) for g in samples]} samples for "
                f"{len(prompts)} prompts; expected {num_samples} each."
            )
        return [list(group) for group in samples]
    if callable(agent):
        return [[agent(prompt) for _ in range(num_samples)] for prompt in prompts]
    raise TypeError(
        f"The agent must be a callable prompt -> trajectory text or have sample_trajectories(); got "
        f"{type(agent).__name__}."
    )


def _questions_table(questions, question_column: str, id_column: str | None):
    """``(prompts, question_ids, extra_columns)`` from a list of prompts or a ``datasets.Dataset``; a question without
    an id (or whose id is ``None``) gets ``question_id_of`` its text, the id ``to_rapo_rows`` gives its row."""
    if isinstance(questions, (list, tuple)):
        return list(questions), [question_id_of(prompt_text(q)) for q in questions], {}
    from rapo_trl.store.dataset_io import require_columns

    require_columns(questions, [question_column], "question")
    prompts = list(questions[question_column])
    if id_column is not None and id_column in questions.column_names:
        # A row without an id (None in the column) is named as to_rapo_rows names it, not "None": one shared string
        # would merge those questions into one, keeping keep_top_k trajectories among all of them.
        ids = [question_id_of(prompt_text(prompt)) if value is None else str(value)
               for value, prompt in zip(questions[id_column], prompts, strict=True)]
    else:
        ids = [question_id_of(prompt_text(prompt)) for prompt in prompts]
    extras = {c: list(questions[c]) for c in questions.column_names if c not in (question_column, id_column)}
    return prompts, ids, extras


def done_questions(store, question_ids: list[str], source: str) -> set[str]:
    """Which of ``question_ids`` already have records from ``source``: what a resumed build skips."""
    found = store.collection.get(
        where={"$and": [{"source": source}, {"question_id": {"$in": question_ids}}]}, include=["metadatas"]
    )
    return {metadata["question_id"] for metadata in found["metadatas"]}


def stored_question_ids(store, source: str | None = None) -> set[str]:
    """The question ids of ``store``'s records (of ``source`` alone when given): what a resumed build would skip,
    and what tells a store of other questions (an earlier build from another split) from this build's."""
    found = set()
    for page in store.iter_batches():
        found.update(m["question_id"] for m in page["metadatas"] if source is None or m["source"] == source)
    return found


def stored_first_keys(store) -> set[str]:
    """The keys of ``store``'s first steps: each stored question's text as a key reads it (`preprocess_context`), which
    tells a question stored under another id (its text spaced or cased otherwise) for the same question."""
    found = set()
    for page in store.iter_batches(include=("metadatas", "documents")):
        found.update(key for key, metadata in zip(page["documents"], page["metadatas"]) if metadata["step_index"] == 0)
    return found


def build_from_agent(
    store,
    agent,
    questions: Sequence | object,
    reward_fn: Callable[..., list[float]],
    num_samples: int = 16,
    keep_top_k: int = 5,
    question_column: str = "prompt",
    id_column: str | None = "question_id",
    questions_per_batch: int = 8,
    source: str = "agent",
    resume: bool = True,
    show_progress: bool | None = None,
    seed: int | None = None,
    tool_tags: Sequence[str] | None = None,
) -> int:
    """Build (or resume building) ``store`` from an off-policy agent; returns the records added.

    Args:
        agent: a callable ``prompt -> trajectory`` or a :class:`TrajectorySampler`.
        questions: a list of prompts (question text or chat messages) or a ``datasets.Dataset``
            with ``question_column`` and optionally ``id_column`` (ids default to a hash of the text).
        reward_fn: a TRL-style reward function ``reward_fn(prompts=..., completions=..., **columns)
            -> list[float]``; ``columns`` are the dataset's other columns, one value per completion. As TRL gives
            them, a conversation's completions are lists of one assistant message, a plain prompt's are texts.
        num_samples: trajectories sampled per question (paper: 16).
        keep_top_k: best trajectories kept per question (paper: 5).
        questions_per_batch: questions sampled, scored and written together.
        resume: skip questions that already have records from ``source``.
        seed: when set, each question is sampled on its own with Python's, NumPy's and torch's RNGs
            seeded from ``(seed, question id)``, so a resumed build samples exactly what an
            uninterrupted one would have (batched sampling would draw differently once the batches
            change). ``None`` samples ``questions_per_batch`` questions per agent call, unseeded.
        tool_tags: the tags of the tools the agent calls, each call one step (as the trainer retrieves after each);
            ``None``: the agent's own ``tool_tags`` (a :class:`~rapo_trl.RolloutAgent`'s tools), else the store's.
    """
    from tqdm.auto import tqdm

    if hasattr(store, "acquire_write_lock"):
        store.acquire_write_lock()  # fail now, not after sampling a first batch, if another process has it
    prompts, ids, extras = _questions_table(questions, question_column, id_column)
    show = store.config.show_progress if show_progress is None else show_progress
    tags = getattr(agent, "tool_tags", None) if tool_tags is None else tool_tags
    added = 0
    problems: list[str] = []
    with tqdm(total=len(prompts), desc="Building trace store", unit="q", disable=not show) as bar:
        for start in range(0, len(prompts), questions_per_batch):
            batch = list(range(start, min(start + questions_per_batch, len(prompts))))
            if resume:
                done = done_questions(store, [ids[i] for i in batch], source)
                batch = [i for i in batch if ids[i] not in done]
            if batch:
                added_now, problems_now = _build_batch(
                    store, agent, reward_fn, batch, prompts, ids, extras, num_samples, keep_top_k, source, seed, tags
                )
                added += added_now
                problems.extend(problems_now)
            bar.update(min(questions_per_batch, len(prompts) - start))
    if problems:
        # Each problem is "row N: ...", N counted within its batch: the reasons are what tells the user what to fix.
        reasons = list(dict.fromkeys(problem.split(": ", 1)[-1] for problem in problems))
        logger.warning(
            "Skipped %d malformed agent trajectories (empty or untagged, or a reward that is not a finite number): %s.",
            len(problems), "; ".join(reasons[:3]) + (f" (and {len(reasons) - 3} other reasons)" if len(reasons) > 3
                                                     else ""),
        )
    return added


def question_seed(seed: int, question_id: str) -> int:
    """A 32-bit seed for one question, stable across processes and Python versions."""
    digest = hashlib.sha256(f"{seed}:{question_id}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and (when loaded) torch's global RNGs."""
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)  # all devices


def _build_batch(store, agent, reward_fn, batch, prompts, ids, extras, num_samples, keep_top_k, source, seed,
                 tool_tags):
    if seed is None:
        samples = sample(agent, [prompts[i] for i in batch], num_samples)
    else:
        samples = []
        for i in batch:
            seed_everything(question_seed(seed, ids[i]))
            samples.extend(sample(agent, [prompts[i]], num_samples))
    flat_prompts = [prompts[i] for i in batch for _ in range(num_samples)]
    completions = [text for group in samples for text in group]
    columns = {
        name: [values[i] for i in batch for _ in range(num_samples)] for name, values in extras.items()
    }
    # As TRL passes them: a conversation's completion is a list of one assistant message (TRL's own rewards read
    # completion[0]["content"]), a plain prompt's is its text.
    scored = [[{"role": "assistant", "content": text}] if isinstance(prompt, (list, tuple)) else text
              for prompt, text in zip(flat_prompts, completions, strict=True)]
    rewards = reward_list(resolved(reward_fn(prompts=flat_prompts, completions=scored, **columns)), len(completions))
    from rapo_trl.store.ingest import validate_trajectories

    question_ids = [ids[i] for i in batch for _ in range(num_samples)]
    # An agent's malformed samples are data, not a user error: skip them.
    _, problems = validate_trajectories(completions, rewards, question_ids, None, on_invalid="skip")
    added = store.add_trajectories(
        completions, rewards, question_ids, source, keep_top_k, flat_prompts, on_invalid="skip",
        **({} if tool_tags is None else {"tool_tags": tool_tags}),
    )
    return added, problems


def reward_list(rewards, count: int) -> list:
    """A reward function's result for ``count`` completions as a list of one reward each; a result that is not one
    (a single number, a mapping, text, a column of shape ``(count, 1)``) is refused with a ``TypeError`` naming it,
    rather than iterated into rewards that are each skipped as malformed."""
    import numpy as np

    if isinstance(rewards, (str, bytes, dict)) or not hasattr(rewards, "__iter__"):
        raise TypeError(f"reward_fn must return one reward per completion (a list of {count} numbers), got "
                        f"{type(rewards).__name__} {str(rewards)[:80]!r}.")
    shape = getattr(rewards, "shape", None)
    if shape is not None and len(shape) != 1:
        raise TypeError(f"reward_fn must return one reward per completion (a list of {count} numbers), got "
                        f"{type(rewards).__name__} of shape {tuple(shape)}.")
    rewards = list(rewards)
    if len(rewards) != count:
        raise ValueError(f"reward_fn returned {len(rewards)} rewards for {count} completions.")
    return [reward.item() if isinstance(reward, np.generic) else reward for reward in rewards]
