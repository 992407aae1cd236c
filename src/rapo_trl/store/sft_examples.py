"""SFT examples from a trace store: each question's best stored trajectory, reassembled from its step records, as the
completion of that question's prompt. What ``rapo train``'s SFT stages imitate (`rapo_trl.cli.warm_start`) and what
``TraceStore.sft_dataset`` hands to TRL's ``SFTTrainer``."""

from __future__ import annotations

import warnings

STEP_SEPARATOR = "\n"
"""Between a trajectory's stored steps when they are joined into one completion."""


def trajectory_steps_from_store(store, min_reward: float) -> dict[str, list[str]]:
    """``question_id -> steps`` of each question's best whole stored trajectory with reward >= min_reward, in order.
    A trajectory missing steps (`is_whole`) is passed over, with a warning: imitating part of one would teach a
    completion that stops or starts mid-way."""
    records = store.to_dataset(include_embeddings=False)
    steps: dict[str, list[tuple[int, str]]] = {}
    declared: dict[str, int] = {}
    reward_of: dict[str, tuple[float, str]] = {}
    for row in records:
        steps.setdefault(row["trajectory_id"], []).append((row["step_index"], row["value"]))
        declared[row["trajectory_id"]] = int(row.get("num_steps") or 0)
        reward_of[row["trajectory_id"]] = (float(row["reward"]), row["question_id"])
    best: dict[str, tuple[float, str]] = {}
    partial = 0
    for trajectory, (reward, question) in reward_of.items():
        if reward < min_reward or reward <= best.get(question, (float("-inf"), ""))[0]:
            continue
        if not is_whole(sorted(index for index, _ in steps[trajectory]), declared[trajectory]):
            partial += 1
            continue
        best[question] = (reward, trajectory)
    if partial:
        warnings.warn(f"{partial} stored trajectories with reward >= {min_reward:g} miss steps and were not imitated: "
                      "their records do not share a trajectory_id with steps 0 to num_steps - 1 (records added from "
                      "a dataset without a trajectory_id column each count as a trajectory of their own)",
                      stacklevel=2)
    return {qid: [text for _, text in sorted(steps[tid])] for qid, (_, tid) in best.items()}


def is_whole(step_indices: list[int], num_steps: int) -> bool:
    """Whether a trajectory's sorted step indices are all of its steps: 0, 1, ... each once, as many as ``num_steps``
    says where it is known (0: unknown)."""
    return step_indices == list(range(len(step_indices))) and num_steps in (0, len(step_indices))


def best_trajectories(rows, store, min_reward: float) -> list[tuple[object, list[str]]]:
    """``(prompt, steps)`` for each of ``rows`` (RL rows: a ``prompt`` and a ``question_id`` each) whose question has
    a stored trajectory with reward >= ``min_reward``: the best one's steps, in order; rows without one are left out.
    Raises ValueError when no row has one: an SFT on nothing would train nothing."""
    by_question = trajectory_steps_from_store(store, min_reward)
    chosen = [(row["prompt"], by_question[row["question_id"]]) for row in rows if row["question_id"] in by_question]
    if not chosen:
        name = getattr(getattr(store, "collection", None), "name", None)
        raise ValueError(f"the store{f' collection {name!r}' if name else ''} holds no trajectory with reward >= "
                         f"{min_reward:g} of any of these {len(rows)} questions, so there is nothing to imitate")
    return chosen


def plain_example(prompt, steps: list[str]) -> dict:
    """A conversational prompt-completion example: ``prompt`` answered by the trajectory's ``steps``, joined."""
    return {"prompt": prompt, "completion": [{"role": "assistant", "content": STEP_SEPARATOR.join(steps)}]}


def sft_examples(rows, store, min_reward: float = 1.0) -> list[dict]:
    """`plain_example` of each of ``rows`` with a stored trajectory with reward >= ``min_reward`` (`best_trajectories`,
    which raises when none has one)."""
    return [plain_example(prompt, steps) for prompt, steps in best_trajectories(rows, store, min_reward)]
