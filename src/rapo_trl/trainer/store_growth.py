"""Growing the store with the policy's own best trajectories, and refusing growth a store cannot take."""

from __future__ import annotations

import hashlib

import torch

from rapo_trl.rewards.view import policy_view
from rapo_trl.rollout import RolloutRow
from rapo_trl.store.steps import prompt_text


def check_store_growth(store, args, num_processes: int) -> None:
    """Refuse growth the store cannot take: an embedded store written by several processes."""
    if args.grow_store and num_processes > 1 and store is not None and getattr(store, "path", None) is not None:
        raise ValueError(
            "grow_store with several processes needs a store they can all write: an embedded store is "
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


def grow_store(store, inputs: list[dict], rows: list[RolloutRow], chosen: list[tuple[int, float]], tokenizer) -> None:
    """Add the chosen rows' policy text (retrieved spans removed) as trajectories of their questions."""
    if not chosen or not hasattr(store, "add_policy_trajectories"):
        return
    prompts = [inputs[i]["prompt"] for i, _ in chosen]
    store.add_policy_trajectories(
        prompts=prompts,
        completions=[tokenizer.decode(policy_view(rows[i]), skip_special_tokens=True) for i, _ in chosen],
        rewards=[reward for _, reward in chosen],
        question_ids=[
            str(inputs[i].get("question_id") or hashlib.sha1(prompt_text(p).encode()).hexdigest()[:16])
            for (i, _), p in zip(chosen, prompts)
        ],
        min_reward=float("-inf"),
        keep_top_k=1,
    )
