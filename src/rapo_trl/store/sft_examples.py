"""SFT examples from a trace store: each question's best stored trajectory, reassembled from its step records, as the
completion of that question's prompt. What ``rapo train``'s SFT stages imitate (`rapo_trl.cli.warm_start`) and what
``TraceStore.sft_dataset`` hands to TRL's ``SFTTrainer``."""

from __future__ import annotations

STEP_SEPARATOR = "\n"
"""Between a trajectory's stored steps when they are joined into one completion."""


def trajectory_steps_from_store(store, min_reward: float) -> dict[str, list[str]]:
    """``question_id -> steps`` of each question's best stored trajectory with reward >= min_reward, in order."""
    records = store.to_dataset(include_embeddings=False)
    steps: dict[str, list[tuple[int, str]]] = {}
    best: dict[str, tuple[float, str]] = {}
    for row in records:
        steps.setdefault(row["trajectory_id"], []).append((row["step_index"], row["value"]))
        reward = float(row["reward"])
        if reward >= min_reward and reward > best.get(row["question_id"], (float("-inf"), ""))[0]:
            best[row["question_id"]] = (reward, row["trajectory_id"])
    return {qid: [text for _, text in sorted(steps[tid])] for qid, (_, tid) in best.items()}


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
