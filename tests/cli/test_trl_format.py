"""A TRL user's dataset and rewards as `trl grpo` takes them: a conversational ``prompt`` and a ``solution`` column,
TRL's short reward names, and the held-out split as ``eval_dataset`` when ``eval_strategy`` evaluates during
training."""

from __future__ import annotations

import json

import pytest
from datasets import Dataset, DatasetDict

from rapo_trl.cli import parse_recipe, read_recipe, train
from rapo_trl.cli.common import UsageError, load_questions, training_rows
from rapo_trl.cli.rewards import make_reward


def _trl_dataset(folder, n=8, question=lambda i: [{"role": "user", "content": f"What is {i} + {i}?"}]):
    rows = [{"prompt": question(i), "solution": str(2 * i)} for i in range(n)]
    DatasetDict({"train": Dataset.from_list(rows[2:]), "test": Dataset.from_list(rows[:2])}).save_to_disk(folder)
    return str(folder)


def _argv(folder, *more):
    return ["--task", "dataset", "--dataset_name", folder, *more]


def test_a_conversational_prompt_and_solution_are_the_question_and_answer(tmp_path):
    script, _, _ = parse_recipe("train", _argv(_trl_dataset(tmp_path / "trl")))
    train_rows = load_questions(script, "train")
    assert train_rows["question"][0] == "What is 2 + 2?" and train_rows["answer"][0] == "4"
    rows = training_rows(script, "train", [])
    assert rows[0]["prompt"][-1] == {"role": "user", "content": "What is 2 + 2?"}
    assert len(load_questions(script, "eval")) == 2  # the test split held out


def test_trls_short_reward_names_are_trls_rewards_and_a_typo_gets_a_hint(tmp_path):
    folder = _trl_dataset(tmp_path / "trl")
    read_recipe("train", _argv(folder, "--reward_funcs", "accuracy_reward"))  # checked without importing it
    script, _, _ = parse_recipe("train", _argv(folder, "--reward_funcs", "accuracy_reward"))
    from trl.rewards import accuracy_reward

    assert make_reward(script, "accuracy_reward") is accuracy_reward
    with pytest.raises(UsageError, match="unknown reward 'acuracy_reward'; did you mean 'accuracy_reward'?"):
        read_recipe("train", _argv(folder, "--reward_funcs", "acuracy_reward"))


def test_a_question_column_that_is_not_text_is_refused_in_one_line(tmp_path):
    folder = _trl_dataset(tmp_path / "numbers", question=lambda i: i)
    script, _, _ = parse_recipe("train", _argv(folder))
    with pytest.raises(UsageError, match=r"row 0: question column 'prompt' holds int '2', not question text"):
        load_questions(script, "train")


@pytest.mark.parametrize("turns", [
    [{"role": "assistant", "content": "The sum is 4."}],  # a chat dataset's `messages`: the reply is the answer
    [{"role": "assistant", "content": "The sum is 4."}, {"role": "user", "content": "And 3 + 3?"}],
])
def test_a_conversation_with_an_assistant_turn_is_refused_not_put_in_the_question(tmp_path, turns):
    folder = _trl_dataset(tmp_path / "chat", question=lambda i: [{"role": "user", "content": f"What is {i} + {i}?"},
                                                                 *turns])
    script, _, _ = parse_recipe("train", _argv(folder))
    with pytest.raises(UsageError, match=r"row 0: question column 'prompt' holds a conversation with a turn of "
                                         r"role 'assistant'"):
        load_questions(script, "train")


def test_a_system_turn_left_out_of_the_question_is_named_once_per_split(tmp_path, caplog):
    system = {"role": "system", "content": "Answer in French."}
    folder = _trl_dataset(tmp_path / "system", question=lambda i: [
        *([system] if i % 2 else []), {"role": "user", "content": f"What is {i} + {i}?"}])
    script, _, _ = parse_recipe("train", _argv(folder))
    with caplog.at_level("WARNING", logger="rapo_trl.cli.user_data"):
        rows = training_rows(script, "train", [])
    warnings = [r.getMessage() for r in caplog.records if "system turn" in r.getMessage()]
    assert len(warnings) == 2, warnings  # the train split and the test split, once each
    assert "split 'train'): 3 of 6 conversations have a system turn" in warnings[0]
    assert "RAPO's system prompt for the recipe's tools (rapo_trl.tasks.system_prompt_for)" in warnings[0]
    assert "to_rapo_rows(..., system_prompt=...)" in warnings[0]
    assert rows[1]["prompt"][-1] == {"role": "user", "content": "What is 3 + 3?"}  # the prompt built as before
    assert all(message["content"] != "Answer in French." for row in rows for message in row["prompt"])


def test_conversations_without_a_system_turn_warn_of_none(tmp_path, caplog):
    script, _, _ = parse_recipe("train", _argv(_trl_dataset(tmp_path / "trl")))
    with caplog.at_level("WARNING", logger="rapo_trl.cli.user_data"):
        load_questions(script, "train")
    assert "system turn" not in caplog.text


def test_eval_strategy_evaluates_the_held_out_split_during_training(tmp_path, tiny_model_dir):
    folder = _trl_dataset(tmp_path / "trl")
    out = tmp_path / "model"
    argv = _argv(folder, "--model_name_or_path", str(tiny_model_dir), "--output_dir", str(out), "--use_cpu",
                 "--bf16", "false", "--report_to", "none", "--retrieve_prob", "0", "--num_hybrid_generations", "0",
                 "--reward_funcs", "accuracy_reward", "--max_steps", "1", "--num_generations", "2",
                 "--per_device_train_batch_size", "2", "--per_device_eval_batch_size", "2",
                 "--max_completion_length", "8", "--max_turn_tokens", "8", "--save_strategy", "no",
                 "--eval_strategy", "steps", "--eval_steps", "1", "--logging_steps", "1")
    train.run(*parse_recipe("train", argv))
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert any("eval_reward" in entry for entry in history), history
