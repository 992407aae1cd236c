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


def test_a_system_turn_is_kept_after_the_recipes_system_prompt(tmp_path):
    """The data's instructions reach the policy, and the recipe's prompt still teaches its tools, as from Python a
    conversational prompt's system turn is kept (RAPOTrainer trains on a row's prompt as it is)."""
    from rapo_trl.tasks import system_prompt_for
    from rapo_trl.tools import PythonTool

    system = {"role": "system", "content": "Answer in French."}
    folder = _trl_dataset(tmp_path / "system", question=lambda i: [
        *([system] if i % 2 else []), {"role": "user", "content": f"What is {i} + {i}?"}])
    script, _, _ = parse_recipe("train", _argv(folder))
    rows = training_rows(script, "train", [PythonTool()])
    protocol = system_prompt_for([PythonTool()])
    assert rows[1]["prompt"] == [{"role": "system", "content": f"{protocol}\n\nAnswer in French."},
                                 {"role": "user", "content": "What is 3 + 3?"}]
    assert rows[0]["prompt"][0] == {"role": "system", "content": protocol}  # a row without one: the recipe's alone
    assert load_questions(script, "train")["question"][1] == "What is 3 + 3?"  # the question is the user's text
    assert "system_turn" not in rows.column_names  # its text is in the prompt, not a column rewards are passed
    eval_rows = training_rows(script, "eval", [PythonTool()])
    assert eval_rows[1]["prompt"][0]["content"].endswith("\n\nAnswer in French.")  # evaluated as it trained


def test_a_system_turn_is_the_system_message_with_an_environment(tmp_path):
    from rapo_trl.cli.environment import environment_rows

    folder = _trl_dataset(tmp_path / "system", question=lambda i: [
        {"role": "system", "content": "Answer in French."}, {"role": "user", "content": f"What is {i} + {i}?"}])
    script, _, _ = parse_recipe("train", _argv(folder))
    assert environment_rows(script, "train")[0]["prompt"] == [{"role": "system", "content": "Answer in French."},
                                                              {"role": "user", "content": "What is 2 + 2?"}]


def test_conversations_without_a_system_turn_get_the_recipes_prompt_alone(tmp_path):
    script, _, _ = parse_recipe("train", _argv(_trl_dataset(tmp_path / "trl")))
    assert "system_turn" not in load_questions(script, "train").column_names
    assert [message["role"] for message in training_rows(script, "train", [])[0]["prompt"]] == ["system", "user"]


def test_a_column_named_as_the_system_turns_is_refused_not_overwritten(tmp_path):
    folder = tmp_path / "clash"
    rows = [{"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"{i} + {i}?"}],
             "solution": str(2 * i), "system_turn": "mine"} for i in range(4)]
    DatasetDict({"train": Dataset.from_list(rows)}).save_to_disk(folder)
    script, _, _ = parse_recipe("train", _argv(str(folder)))
    with pytest.raises(UsageError, match="has a column 'system_turn', the name RAPO gives the system turns"):
        load_questions(script, "train")
    jsonl = tmp_path / "clash.jsonl"
    jsonl.write_text(json.dumps({"question": "1 + 1?", "answer": "2", "system_turn": "mine"}) + "\n")
    with pytest.raises(UsageError, match=r"dataset_path '.*clash.jsonl' has a column 'system_turn'"):
        parse_recipe("train", ["--task", "dataset", "--dataset_path", str(jsonl)])  # its early checks refuse it


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
    assert "\ndatasets:" not in (out / "README.md").read_text()  # a local folder is no Hub dataset


def test_the_card_names_the_hub_dataset_trained_on_as_trl_grpo_does(tmp_path, tiny_model_dir, monkeypatch):
    """`dataset_name` a Hub id: the card's `datasets:` entry, linked in its opening sentence (a local folder is not:
    the test above)."""
    import yaml

    from rapo_trl.cli import user_data

    folder = _trl_dataset(tmp_path / "trl")
    monkeypatch.setattr(user_data, "load_user_dataset", lambda name, config=None: DatasetDict.load_from_disk(folder))
    out = tmp_path / "model"
    argv = _argv("org/tiny-sums", "--model_name_or_path", str(tiny_model_dir), "--output_dir", str(out),
                 "--use_cpu", "--bf16", "false", "--report_to", "none", "--retrieve_prob", "0",
                 "--num_hybrid_generations", "0", "--reward_funcs", "accuracy_reward", "--max_steps", "1",
                 "--num_generations", "2", "--per_device_train_batch_size", "2", "--max_completion_length", "8",
                 "--max_turn_tokens", "8", "--save_strategy", "no")
    train.run(*parse_recipe("train", argv))
    card = (out / "README.md").read_text()
    assert yaml.safe_load(card.split("---\n", 2)[1])["datasets"] == "org/tiny-sums"  # as TRL writes it
    assert "on the [org/tiny-sums](https://huggingface.co/datasets/org/tiny-sums) dataset" in card
