"""Growing the store with the policy's own best trajectories, and refusing growth a store cannot take."""

from __future__ import annotations

import inspect
import logging

import torch

from rapo_trl.question_ids import question_id_of
from rapo_trl.rewards.view import policy_view
from rapo_trl.rollout import RolloutRow
from rapo_trl.store.retry import PROGRAMMING_ERRORS
from rapo_trl.store.steps import prompt_text

logger = logging.getLogger("rapo_trl.trainer")


def check_store_growth(store, args, num_processes: int) -> None:
    """Refuse growth the store cannot take: an embedded store written by several processes."""
    growing = args.store_growth_min_reward is not None
    if growing and num_processes > 1 and store is not None and getattr(store, "path", None) is not None:
        raise ValueError(
            "store_growth_min_reward with several processes needs a store they can all write: an embedded store is "
            "single-writer. Serve it with `chroma run --path DIR` and pass TraceStore.connect(host, port)."
        )


def best_of_each_group(rewards: torch.Tensor, group_size: int, start: int, n_local: int,
                       min_reward: float) -> list[tuple[int, float]]:
    """(local row, reward) of each group's best row that this process holds and that reaches ``min_reward``.

    ``rewards`` covers every process's rows; this process holds rows ``start .. start + n_local``.
    """
    chosen = []
    for first in range(0, rewards.numel(), group_size):
        best = first + int(rewards[first : first + group_size].nan_to_num(nan=float("-inf")).argmax())  # NaN: unscorable
        local = best - start
        if 0 <= local < n_local and float(rewards[best]) >= min_reward:
            chosen.append((local, float(rewards[best])))
    return chosen


def grow_store(store, inputs: list[dict], rows: list[RolloutRow], chosen: list[tuple[int, float]], tokenizer,
               outage=None, tag: dict | None = None, tool_tags: list[str] | None = None) -> None:
    """Add the chosen rows' policy text (``policy_view``: retrieved blocks removed) as trajectories of their
    questions, each record with the metadata ``tag`` (the run and step that grew it,
    ``resilience/growth_rollback.py``) where the store takes it, cut into steps at the calls of ``tool_tags`` (the
    trainer's tag tools; a fresh store knows only the built-in ones) where the store takes them.

    A store that cannot be written (its server down) costs this step's additions, not the step: said once per
    outage (``outage``, the rollouts' :class:`~rapo_trl.store.outage.StoreOutage`, also says when it began)."""
    if not chosen or not hasattr(store, "add_policy_trajectories"):
        return
    try:
        _add(store, inputs, rows, chosen, tokenizer, tag, tool_tags)
    except PROGRAMMING_ERRORS:  # a bug, not the store being down: say so, never skip it step after step
        raise
    except Exception as error:  # noqa: BLE001 - a store write must not end the training step
        if outage is None or not outage.down:
            logger.warning("RAPO: could not add this step's %d best trajectories to the trace store (%s: %s); "
                           "training goes on, and later steps try again.", len(chosen), type(error).__name__, error)
        if outage is not None:
            outage.growth_lost += len(chosen)


def _add(store, inputs, rows, chosen, tokenizer, tag, tool_tags) -> None:
    prompts = [inputs[i]["prompt"] for i, _ in chosen]
    tagged = {"metadata": tag} if tag is not None and _takes(store, "metadata") else {}
    if tool_tags and _takes(store, "tool_tags"):
        tagged["tool_tags"] = tool_tags
    if any(rows[i].messages for i, _ in chosen):  # JSON tool calls: steps are the rollout's own turns
        from rapo_trl.store.row_steps import row_step_records

        records = [record for (i, reward), prompt in zip(chosen, prompts)
                   for record in row_step_records(rows[i], tokenizer, prompt_text(prompt), reward,
                                                  _question_id(inputs[i], prompt), "policy", store.preprocess)]
        store.add_records(records, **({"extra_metadata": [tag] * len(records)} if tag is not None else {}))
        return
    store.add_policy_trajectories(
        prompts=prompts,
        completions=[tokenizer.decode(policy_view(rows[i]), skip_special_tokens=True) for i, _ in chosen],
        rewards=[reward for _, reward in chosen],
        question_ids=[_question_id(inputs[i], p) for (i, _), p in zip(chosen, prompts)],
        min_reward=float("-inf"),
        keep_top_k=1,
        **tagged,
    )


def _question_id(row: dict, prompt) -> str:
    """The row's ``question_id`` as the rollout's retrieval compares it (``str``, ``0`` included), else a hash of its
    prompt."""
    if row.get("question_id") is not None:
        return str(row["question_id"])
    return question_id_of(prompt_text(prompt))


def _takes(store, argument: str) -> bool:
    """Whether the store's ``add_policy_trajectories`` takes ``argument`` (a store of the user's own may not)."""
    try:
        parameters = inspect.signature(store.add_policy_trajectories).parameters
    except (TypeError, ValueError):
        return False
    return argument in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())
