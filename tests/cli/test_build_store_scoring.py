"""`rapo build-store` ranks and stores each trajectory with the reward RL gives it: the recipe's reward functions as
the trainer calls them (given the recipe's tool tags, completions in the prompts' form)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from rapo_trl.cli import build_store
from rapo_trl.cli.arguments import RAPOScriptArguments
from rapo_trl.store import TraceStore

ARGS = SimpleNamespace(max_completion_length=64, max_turn_tokens=32, temperature=1.0, use_cpu=True, seed=0,
                       reward_weights=None)


def _stored_rewards(path) -> set[float]:
    store = TraceStore(path)
    try:
        return {m["reward"] for page in store.iter_batches() for m in page["metadatas"]}
    finally:
        store.close()


def _right_answers_naming_search(script, rows, tools):
    """An agent that answers right with one python call, its reasoning naming <search>...</search>, a tool the
    recipe does not run (a model may write any tag in its thoughts; only the recipe's tools are calls)."""
    answers = {json.dumps(row["prompt"]): row["answer"] for row in rows}

    def agent(prompt):
        answer = answers[json.dumps(prompt)]
        return (f"<think>No <search>lookup</search> needed: I compute it.</think>\n<python>\nprint({answer})\n"
                f"</python>\n<result>\n{answer}\n</result>\n<think>It printed {answer}.</think>\n"
                f"<answer>\\boxed{{{answer}}}</answer>")

    return agent


def test_the_stored_reward_is_the_one_training_gives_with_the_recipes_tools(tmp_path, monkeypatch):
    from rapo_trl.rewards import rapo_outcome_reward
    from rapo_trl.trainer.rewards import bind_tool_tags

    monkeypatch.setattr(build_store, "_expert_agent", _right_answers_naming_search)
    script = RAPOScriptArguments(task="arithmetic", tools=["python"], train_size=2, num_samples=1, keep_top_k=1,
                                 store_path=str(tmp_path / "store"))
    build_store.run(script, ARGS, None)
    # The trainer binds its tools' tags to the reward: <search> is text in a python-only rollout, not a call.
    trained = bind_tool_tags([rapo_outcome_reward], ["python"])[0]
    text = _right_answers_naming_search(None, [{"prompt": "q", "answer": "7"}], None)("q")
    assert trained(completions=[text], answer=["7"]) == [1.0]
    assert _stored_rewards(tmp_path / "store") == {1.0}


def test_trls_reward_scores_the_trajectories_as_conversations_like_training(tmp_path):
    # TRL's rewards read a completion as the trainer passes it for a conversational prompt: a list of one message.
    script = RAPOScriptArguments(task="arithmetic", train_size=2, num_samples=1, keep_top_k=1, expert_error_rate=0.0,
                                 reward_funcs=["accuracy_reward"], store_path=str(tmp_path / "store"))
    build_store.run(script, ARGS, None)
    assert _stored_rewards(tmp_path / "store") == {1.0}  # the expert answers every question right
