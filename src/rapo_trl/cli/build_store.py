"""``rapo build-store``: an off-policy agent solves the training questions; its best steps fill the store."""

from __future__ import annotations

import json
import logging
import random

from rapo_trl.cli.common import (
    build_tools,
    check_store_location,
    make_reward,
    open_store,
    resolve_model_path,
    training_rows,
)

logger = logging.getLogger(__name__)


def _expert_agent(script, rows, tools):
    from rapo_trl.tasks import get_task

    if script.task not in ("arithmetic", "word_problems", "two_hop"):
        raise ValueError(f"the scripted expert exists only for the demo tasks, not task={script.task}")
    expert = get_task(script.task).expert
    by_prompt = {json.dumps(row["prompt"]): row for row in rows}
    rngs: dict[str, random.Random] = {}
    tool_map = {tool.tag: tool for tool in tools}

    def agent(prompt):
        key = json.dumps(prompt)
        # One generator per question, seeded from it: a resumed build (which skips the questions
        # already stored) draws for each remaining question exactly what a full build would.
        rng = rngs.setdefault(key, random.Random(f"{script.task_seed}:{key}"))
        return expert(by_prompt[key], error_rate=script.expert_error_rate, rng=rng, tools=tool_map)

    return agent


def run(script, rapo_args, model_args) -> dict:
    check_store_location(script, must_exist=False)  # before a model agent loads
    rows = training_rows(script, "demo")  # the prompts training uses, so a model agent sees the same
    tools = build_tools(script)
    if script.agent == "expert":
        agent = _expert_agent(script, rows, tools)
    else:
        from rapo_trl.rollout.agent import RolloutAgent

        agent = RolloutAgent.from_pretrained(
            resolve_model_path(script.agent), tools,
            max_completion_length=rapo_args.max_completion_length, max_turn_tokens=rapo_args.max_turn_tokens,
            temperature=rapo_args.temperature, device=script.device,
        )
    store = open_store(script, must_exist=False)
    added = store.build_from_agent(
        agent, rows, make_reward(script), num_samples=script.num_samples, keep_top_k=script.keep_top_k,
        source=f"agent:{script.agent}", seed=rapo_args.seed,
    )
    stats = store.stats()
    print(f"Added {added} step records; the store now holds {stats['records']} records "
          f"from {stats['questions']} questions at {store.location}.")
    return {"added": added, **stats}
