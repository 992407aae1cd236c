"""Recipe settings that must reach what uses them, not be set and then silently ignored."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest

from tests.cli.conftest import write_yaml
from tests.cli.runs import rapo_env


def test_the_recipes_env_is_set_before_the_libraries_that_read_it_at_import(tmp_path):
    """`env: {HF_HOME: ...}` reaches huggingface_hub, which reads it once, when imported (as TRL's parser is)."""
    hf_home = tmp_path / "hf-home"
    config = write_yaml(tmp_path / "env.yaml", {"output_dir": str(tmp_path / "out"), "env": {"HF_HOME": str(hf_home)}})
    code = textwrap.dedent(f"""
        from rapo_trl.cli import parse_recipe, read_recipe

        argv = ["--config", {str(config)!r}]
        read_recipe("train", argv)  # `rapo train` checks the recipe first, then parses it with TRL's parser
        parse_recipe("train", argv)
        import huggingface_hub

        print(huggingface_hub.constants.HF_HOME)
    """)
    env = rapo_env()
    env.pop("HF_HOME", None)
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().splitlines()[-1] == str(hf_home)


def test_an_env_that_is_not_a_mapping_is_one_line(tmp_path):
    import pytest

    from rapo_trl.cli import read_recipe

    config = write_yaml(tmp_path / "env.yaml", {"output_dir": str(tmp_path / "out"), "env": ["HF_HOME"]})
    with pytest.raises(ValueError, match="`env` must be a mapping"):
        read_recipe("train", ["--config", str(config)])


def test_a_number_list_in_yaml_takes_exponents_as_a_float_field_does(tmp_path):
    """YAML 1.1 reads `1e-1` as text: argparse converts it for `learning_rate`, and now for `reward_weights` items too
    (it reached GRPOTrainer as the string '1e-1', which failed in torch.tensor once the model had loaded)."""
    import pytest

    from rapo_trl.cli import parse_recipe, read_recipe

    base = {"output_dir": str(tmp_path / "out"), "reward_funcs": ["rapo_outcome", "f1"]}
    config = write_yaml(tmp_path / "weights.yaml", base)
    config.write_text(config.read_text() + "reward_weights: [1e-1, 1]\n")
    assert read_recipe("train", ["--config", str(config)])[1].reward_weights == [0.1, 1]
    assert parse_recipe("train", ["--config", str(config)])[1].reward_weights == [0.1, 1]
    bad = write_yaml(tmp_path / "bad.yaml", {**base, "reward_weights": ["half", 1]})
    with pytest.raises(ValueError, match="'reward_weights'.*wrong type"):
        read_recipe("train", ["--config", str(bad)])


def test_one_name_in_yaml_for_a_list_field_is_a_list_of_that_name_as_on_the_command_line(tmp_path):
    """`lora_modules_to_save: lm_head` reached PEFT as the string, whose every letter it took for a module name: it
    trained the whole inner model (its name ends in `l`) and every norm, where `--lora_modules_to_save lm_head`
    trains the head alone."""
    from rapo_trl.cli import parse_recipe, read_recipe

    config = write_yaml(tmp_path / "one.yaml", {"output_dir": str(tmp_path / "out"), "use_peft": True,
                                                "lora_modules_to_save": "lm_head", "label_names": "labels"})
    argv = ["--config", str(config)]
    _, training, model = read_recipe("train", argv)
    assert model.lora_modules_to_save == ["lm_head"] and training.label_names == ["labels"]
    _, training, model = parse_recipe("train", argv)
    assert model.lora_modules_to_save == ["lm_head"] and training.label_names == ["labels"]
    assert parse_recipe("train", [*argv, "--lora_modules_to_save", "lm_head"])[2].lora_modules_to_save == ["lm_head"]


def test_a_failed_push_names_a_retry_that_pushes_as_the_recipe_asked(tmp_path, monkeypatch):
    """A private repo's retry must not create a public one (nor push to main, nor leave the warm start home)."""
    import shlex

    import pytest

    from rapo_trl.cli import build_parser, parse_recipe, push, train

    def offline(*args, **kwargs):
        raise OSError("network unreachable")

    monkeypatch.setattr(push, "push_run", offline)
    script, rapo_args, _ = parse_recipe("train", [
        "--output_dir", str(tmp_path / "my run"), "--push_to_hub", "--hub_model_id", "me/model",
        "--hub_private_repo", "--hub_revision", "v1", "--push_warm_start", "true"])
    with pytest.raises(RuntimeError, match="retry with") as failed:
        train._push(script, rapo_args, "org/base")
    retry = str(failed.value).split("retry with `", 1)[1].rstrip("`")
    args = build_parser().parse_args(shlex.split(retry)[1:])
    assert (args.run, args.hub_model_id) == (str(tmp_path / "my run"), "me/model")
    assert (args.hub_private_repo, args.hub_revision, args.push_warm_start) == (True, "v1", True)


def test_rapo_push_takes_true_and_false_after_its_flags_as_rapo_train_does():
    from rapo_trl.cli import build_parser

    def parsed(*flags):
        args = build_parser().parse_args(["push", "run", *flags])
        return args.hub_private_repo, args.push_warm_start

    assert parsed() == (False, False)
    assert parsed("--hub_private_repo", "--push_warm_start") == (True, True)
    assert parsed("--hub_private_repo", "true", "--push_warm_start", "false") == (True, False)


@pytest.mark.parametrize("flags, words", [
    (["--question_column", "problem"], "question_column reads your own data, which task=arithmetic has none of"),
    (["--task", "gsm8k", "--dataset_config", "main"], "dataset_config reads your own data"),
    (["--eval_fraction", "0.3"], "eval_fraction reads your own data"),
    (["--task", "dataset", "--dataset_path", "DATA", "--dataset_config", "main"],
     "dataset_config goes with dataset_name"),
    (["--task", "dataset", "--dataset_path", "DATA", "--dataset_train_split", "validation"],
     "dataset_train_split goes with dataset_name"),
])
def test_a_data_setting_the_task_would_ignore_is_refused(flags, words, tmp_path):
    """`trl grpo`'s data flags with a task that never reads them: said, not silently dropped."""
    from rapo_trl.cli import read_recipe
    from rapo_trl.cli.errors import UsageError

    data = tmp_path / "data.jsonl"
    data.write_text('{"question": "1+1?", "answer": "2"}\n{"question": "2+2?", "answer": "4"}\n')
    argv = ["--output_dir", str(tmp_path / "out"), *[str(data) if flag == "DATA" else flag for flag in flags]]
    with pytest.raises(UsageError, match=re.escape(words)):
        read_recipe("train", argv)
    read_recipe("train", ["--output_dir", str(tmp_path / "out"), "--task", "dataset", "--dataset_path", str(data),
                          "--eval_fraction", "0.5", "--question_column", "question"])  # what a JSONL does read


def test_a_flag_only_another_command_reads_is_said_to_be_ignored(tmp_path, monkeypatch, caplog):
    """`rapo train --eval_samples 4` samples nothing: eval reads it. The command says so rather than drop it."""
    from rapo_trl import cli
    from rapo_trl.cli import train

    said = _warnings_until_checked(train, "train", ["--output_dir", str(tmp_path), "--eval_samples", "4",
                                                    "--num-samples=8", "--max_steps", "2"], monkeypatch, caplog)
    assert any("--eval_samples is read by `rapo eval` only" in line for line in said), said
    assert any("--num-samples is read by `rapo build-store` only" in line for line in said), said
    assert not any("max_steps" in line for line in said)
    assert cli.ignored_flags("eval", ["--eval_samples", "4"]) == []


def test_training_flags_given_to_eval_are_said_to_be_ignored(tmp_path, monkeypatch, caplog):
    """`rapo eval --max_steps 10 --retrieve_prob 0.5 --use_cpu` trains nothing, retrieves nothing and places the
    model by `device`: said, not silently dropped; what eval does read (the rollout budget) is not."""
    from rapo_trl import cli
    from rapo_trl.cli import evaluate

    said = _warnings_until_checked(evaluate, "eval", ["--output_dir", str(tmp_path), "--max_steps", "10",
                                                      "--retrieve_prob=0.5", "--use-cpu", "--sft_same_time", "true",
                                                      "--max_completion_length", "64", "--eval_samples", "4"],
                                   monkeypatch, caplog)
    for flag in ("--max_steps", "--retrieve_prob", "--use-cpu", "--sft_same_time"):
        assert any(f"rapo eval: {flag} is read by `rapo train` only" in line for line in said), (flag, said)
    assert not any("max_completion_length" in line or "eval_samples" in line for line in said), said
    assert cli.ignored_flags("train", ["--max_steps", "10", "--retrieve_prob", "0.5"]) == []


def test_no_command_said_to_ignore_a_flag_reads_it():
    """A flag `ignored_flags` calls ignored must be a real field, and unread where it is called ignored."""
    import inspect

    from rapo_trl.cli import build_store, evaluate, model_folder, model_scoring, run_record, training_report
    from rapo_trl.cli.fields import recipe_fields
    from rapo_trl.cli.recipe import ONLY_READ_BY

    others = "".join(inspect.getsource(module) for module in (build_store, evaluate, model_folder, model_scoring,
                                                                  run_record, training_report))
    for reader, names in ONLY_READ_BY.items():
        assert set(names) <= recipe_fields().keys(), reader
        if reader == "train":
            read = [name for name in names if re.search(rf"(args|script)\.{name}\b", others)]
            assert read == [], read


def _warnings_until_checked(module, command: str, argv: list[str], monkeypatch, caplog) -> list[str]:
    """What ``rapo <command> <argv>`` warns before its ``module.check`` runs (stopped there: nothing loads)."""
    from rapo_trl import cli

    class Checked(Exception):
        pass

    def stop(*args):
        raise Checked

    monkeypatch.setattr(module, "check", stop)
    with caplog.at_level("WARNING"), pytest.raises(Checked):
        cli._run_recipe(command, argv)
    return [record.getMessage() for record in caplog.records]


def test_build_store_model_agent_rolls_out_with_the_recipes_tool_budget(monkeypatch):
    """A model agent fills the store under the recipe's max_tool_calls and answer_stop, as eval and the environment
    agent roll out: with RolloutConfig's own 3 calls, a 4-operation question's trajectory was cut short."""
    from types import SimpleNamespace

    import rapo_trl.rollout.agent
    from rapo_trl.cli import build_store

    monkeypatch.setattr(build_store, "_agent_model", lambda *args: ("model", "tokenizer"))
    monkeypatch.setattr(rapo_trl.rollout.agent, "RolloutAgent",
                        lambda model, tokenizer, tools, config, sampling, **kwargs: config)
    rapo_args = SimpleNamespace(max_completion_length=64, max_turn_tokens=16, max_tool_result_chars=None,
                                temperature=1.0, top_p=1.0, top_k=0, min_p=None, repetition_penalty=1.0,
                                step_entropy_top_k=10, generation_kwargs=None, max_tool_calls=5, answer_stop=None,
                                chat_template_kwargs=None)
    config = build_store._model_agent(None, rapo_args, None, tools=())
    assert (config.max_tool_calls, config.answer_stop) == (5, None)
