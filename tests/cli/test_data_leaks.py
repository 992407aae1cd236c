"""Your own data: no held-out question reaches what training reads (the store), whatever settings each command
ran with, and no training row is dropped or merged by a question id that names two questions."""

from __future__ import annotations

import json

import pytest
from datasets import Dataset

from rapo_trl.cli import parse_recipe, train
from rapo_trl.cli.common import UsageError, open_store, training_rows
from rapo_trl.embeddings import HashingEmbedder


@pytest.fixture(autouse=True)
def hashing_embedder(monkeypatch):
    """Model-free embeddings: these tests are about which questions go where, not about similarity."""
    monkeypatch.setattr("rapo_trl.embeddings.default_embedder", lambda: HashingEmbedder())


def _jsonl(path, n=40):
    path.write_text("".join(json.dumps({"question": f"What is {i} * 3?", "answer": str(3 * i)}) + "\n"
                            for i in range(n)))
    return str(path)


def _recipe(tmp_path, command, *flags):
    return parse_recipe(command, ["--task", "dataset", "--dataset_path", _jsonl(tmp_path / "qa.jsonl"),
                                  "--store_path", str(tmp_path / "store"), "--output_dir", str(tmp_path / "model"),
                                  "--model_name_or_path", "tiny", "--use_cpu", "true", "--bf16", "false", "--max_steps", "1",
                                  "--num_generations", "2", "--per_device_train_batch_size", "2",
                                  "--max_completion_length", "16", "--max_turn_tokens", "8", "--save_strategy", "no",
                                  "--report_to", "none", *flags])


def _store_as_build_store_fills_it(script):
    """What `rapo build-store` stores: a trajectory of each question of the recipe's store split, by its id."""
    rows = training_rows(script, "store", tools=[])
    trajectories = Dataset.from_dict({
        "trajectory": [f"<think>multiply</think>\n<answer>\\boxed{{{answer}}}</answer>" for answer in rows["answer"]],
        "reward": [1.0] * len(rows), "question_id": rows["question_id"], "question": rows["question"]})
    with open_store(script, must_exist=False) as store:
        store.add_from_dataset(trajectories, source="agent:test", tool_tags=["python"])


def test_train_refuses_a_store_built_with_another_eval_fraction(tmp_path):
    """build-store with eval_fraction 0.1 stores 36 of 40 questions; train with 0.3 holds out 12, 8 of them stored."""
    _store_as_build_store_fills_it(_recipe(tmp_path, "build-store", "--eval_fraction", "0.1")[0])
    with pytest.raises(UsageError, match="holds trajectories of 8 questions of the eval set 'eval'"):
        train.run(*_recipe(tmp_path, "train", "--eval_fraction", "0.3"))


def test_train_refuses_a_store_built_with_another_task_seed(tmp_path):
    _store_as_build_store_fills_it(_recipe(tmp_path, "build-store", "--task_seed", "0")[0])
    with pytest.raises(UsageError, match="rapo build-store ran with other data settings"):
        train.run(*_recipe(tmp_path, "train", "--task_seed", "1"))


def test_a_store_built_with_the_same_settings_passes(tmp_path):
    script = _recipe(tmp_path, "build-store", "--eval_fraction", "0.3", "--eval_size", "2")[0]
    _store_as_build_store_fills_it(script)
    with open_store(script, must_exist=True) as store:
        train.check_store_holds_no_eval_question(script, {"traces": store})

