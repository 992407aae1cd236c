"""Filling a trace store from an agent acting on a TRL environment: each of RL's own questions is rolled out
``num_samples`` times on fresh environments, scored as GRPOTrainer scores it (the reward functions and the
environment's ``get_reward``, summed), and the steps of the ``keep_top_k`` best rollouts are stored, keyed by the
context as the policy's hybrid rollouts will query it (``store/row_steps.py``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from rapo_trl.awaiting import resolved
from rapo_trl.question_ids import question_id_of
from rapo_trl.store.agent import done_questions
from rapo_trl.store.row_steps import row_step_records
from rapo_trl.store.steps import prompt_text


def episode_rewards(episodes, rows: Sequence[dict], reward_funcs: Sequence[Callable] = (),
                    reward_weights: Sequence[float] | None = None) -> list[float]:
    """Each episode's reward as GRPOTrainer sums it: the reward functions called as TRL calls them (``prompts``,
    ``completions`` as chat messages, ``completion_ids``, ``environments`` and the rows' other columns), weighted by
    ``reward_weights`` (default 1 each), plus ``get_reward()`` of environments that define it, with weight 1; ``async``
    ones awaited; a ``None`` or NaN (a reward function's or ``get_reward``'s) is left out, as TRL leaves out NaN."""
    weights = [1.0] * len(reward_funcs) if reward_weights is None else [float(w) for w in reward_weights]
    if len(weights) != len(reward_funcs):
        raise ValueError(f"got {len(weights)} reward weights for {len(reward_funcs)} reward functions")
    columns = {key: [row[key] for row in rows] for key in rows[0] if key not in ("prompt", "completion")}
    totals = [0.0] * len(episodes)
    for func, weight in zip(reward_funcs, weights):
        scores = resolved(func(prompts=[e.prompt for e in episodes], completions=[e.row.messages for e in episodes],
                               completion_ids=[e.row.completion_ids for e in episodes],
                               environments=[e.environment for e in episodes], **columns))
        if len(scores) != len(episodes):
            raise ValueError(f"The reward function {getattr(func, '__name__', func)!r} returned {len(scores)} rewards "
                             f"for {len(episodes)} completions.")
        totals = [t + (0.0 if s is None or math.isnan(s) else weight * float(s)) for t, s in zip(totals, scores)]
    for i, episode in enumerate(episodes):
        get_reward = getattr(episode.environment, "get_reward", None)
        value = resolved(get_reward()) if callable(get_reward) else None
        totals[i] += 0.0 if value is None or math.isnan(float(value)) else float(value)
    return totals


def build_from_environment(store, agent, dataset, reward_funcs: Sequence[Callable] | Callable = (),
                           num_samples: int = 4, keep_top_k: int = 2, min_reward: float = float("-inf"),
                           source: str = "agent", reward_weights: Sequence[float] | None = None,
                           resume: bool = True) -> int:
    """Fill ``store`` from ``agent`` (an ``EnvironmentAgent``) on ``dataset``'s rows; returns the records added.

    A row's ``question_id`` column names its question (default: ``question_id_of`` its prompt's text, as
    ``to_rapo_rows`` and store growth name it), as the trainer's ``retrieve_own_question`` reads it. Each rollout's
    steps are keyed by its own prompt, ``reset``'s observation included, as the policy's rollout on that episode
    queries. Rollouts with a reward at or below ``min_reward`` are not stored. ``resume``: skip a row whose question
    already has records from ``source`` (a killed build run again, a question listed twice), as ``build_from_agent``
    does; otherwise it is rolled out again and its new best rollouts are stored beside the ones kept before.
    """
    if callable(reward_funcs):
        reward_funcs = [reward_funcs]
    rows = [dict(row) for row in dataset]
    if not rows:
        raise ValueError("build_from_environment got no rows.")
    added = 0
    for row in rows:
        question_id = row_question_id(row)
        if resume and done_questions(store, [question_id], source):
            continue
        samples = [row] * num_samples
        episodes = agent.episodes(samples)
        rewards = episode_rewards(episodes, samples, reward_funcs, reward_weights)
        # An environment may give each episode its own observation: a rollout is keyed by the prompt it answered.
        records = best_distinct((row_step_records(episodes[i].row, agent.tokenizer, prompt_text(episodes[i].prompt),
                                                  rewards[i], question_id, source, preprocess=store.preprocess)
                                 for i in best_first(rewards, min_reward)), keep_top_k)
        added += store.add_records(records) if records else 0
    return added


def best_first(rewards: Sequence[float], min_reward: float) -> list[int]:
    """The rollouts rewarded above ``min_reward``, best first (ties: the earlier rollout)."""
    return [i for i in sorted(range(len(rewards)), key=lambda i: -rewards[i]) if rewards[i] > min_reward]


def best_distinct(rollouts_records, keep_top_k: int) -> list:
    """The records of the first ``keep_top_k`` distinct rollouts of ``rollouts_records`` (each rollout's records, best
    first, read only as far as needed). A rollout sampled twice is one trajectory with the same record ids: it counts
    once, as in ``build_from_agent``, and the next distinct rollout takes the place it would fill."""
    kept: dict[str, list] = {}
    for records in rollouts_records:
        if len(kept) == keep_top_k:
            break
        if records:
            kept.setdefault(records[0].trajectory_id, records)
    return [record for records in kept.values() for record in records]


def row_question_id(row: dict) -> str:
    """The row's ``question_id`` as the trainer compares it (``0`` included), else ``question_id_of`` the text of its
    prompt before ``reset``: the id of the row, whatever each episode observed."""
    if row.get("question_id") is not None:
        return str(row["question_id"])
    return question_id_of(prompt_text(row.get("prompt") or ""))
