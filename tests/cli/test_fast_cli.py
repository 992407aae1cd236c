"""A command line that answers at once: help and recipe errors come before torch, transformers or TRL load;
option names are exact (no prefix matching), and a typo gets a suggestion."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import time

import pytest
import yaml

from rapo_trl.cli.errors import UsageError
from tests.cli.conftest import recipe, write_yaml
from tests.cli.runs import describe, rapo, rapo_env

BOUND_S = 5.0  # they answer in well under 2 s; the bound leaves room for a busy machine

SHOWN = {  # some of each command's own fields, and fields of the others or of TRL that its help leaves out
    "train": (["--model_name_or_path", "--dtype", "--load_in_4bit", "--use_peft", "--store_path", "--retrieve_prob",
               "--retrieval_advantage_weight", "--sft_warmup_steps", "--num_generations", "--max_steps", "--bf16",
               "--retrieve_at", "--retrieved_step_as_own"],
              ["--num_samples", "--eval_model", "--ddp_backend", "--adam_beta1"]),
    "build-store": (["--agent", "--dtype", "--trust_remote_code", "--num_samples", "--keep_top_k", "--store_path",
                     "--max_completion_length"], ["--retrieve_prob", "--learning_rate", "--eval_model", "--lora_r"]),
    "eval": (["--eval_model", "--model_name_or_path", "--attn_implementation", "--eval_size", "--eval_samples",
              "--max_completion_length"], ["--num_generations", "--learning_rate", "--retrieve_prob", "--num_samples"]),
}


def timed(*args, cwd=None):
    start = time.perf_counter()
    run = rapo(*args, cwd=cwd)
    return run, time.perf_counter() - start


@pytest.mark.parametrize("command", list(SHOWN))
def test_help_answers_at_once_with_the_commands_fields(command):
    run, seconds = timed(command, "--help")
    assert run.returncode == 0, describe(run)
    assert seconds < BOUND_S, f"`rapo {command} --help` took {seconds:.1f}s"
    assert run.stdout.startswith(f"usage: rapo {command} [-h] [--config FILE.yaml]"), run.stdout[:300]
    options = set(re.findall(r"--[a-z0-9_]+", run.stdout))
    shown, hidden = SHOWN[command]
    assert set(shown) <= options and not set(hidden) & options, (set(shown) - options, set(hidden) & options)
    # every other field behind one pointer, not ~1,440 lines of GRPOConfig
    assert f"`rapo {command} --help-all` lists them all" in " ".join(run.stdout.split())
    assert len(run.stdout.splitlines()) < 450


def test_help_all_lists_every_field_at_once():
    from rapo_trl.cli.fields import recipe_fields

    run, seconds = timed("eval", "--help-all")
    assert run.returncode == 0 and seconds < BOUND_S, describe(run)
    options = set(re.findall(r"--[a-z0-9_]+", run.stdout))
    assert {f"--{name}" for name in recipe_fields()} <= options


@pytest.fixture
def recipe_file(tmp_path, tiny_model_dir):
    return write_yaml(tmp_path / "recipe.yaml", recipe(tiny_model_dir, tmp_path))


RECIPE_ERRORS = {  # name: (YAML changes or None for the recipe as is, extra arguments, words of the one line)
    "unknown_key": ({"retrive_prob": 0.5}, [], ["unknown key 'retrive_prob'", "did you mean 'retrieve_prob'?"]),
    "wrong_type": ({"max_steps": "ten"}, [], ["'max_steps'", "wrong type", "expected int"]),
    # YAML 1.1 reads `save_strategy: no` as False: the line says to quote it
    "yaml_boolean": ({"save_strategy": False}, [], ["'save_strategy' = False", "expected str",
                                                   "put the text in quotes, save_strategy: \"...\""]),
    "missing_config": (None, ["--config", "no-such.yaml"], ["cannot read config no-such.yaml", "No such file"]),
    "unknown_flag": (None, ["--learning_rat", "1e-4"], ["unrecognized arguments: --learning_rat",
                                                          "did you mean --learning_rate?"]),
    "flag_type": (None, ["--max_steps", "ten"], ["--max_steps", "invalid int value: 'ten'"]),
    "missing_store": ({"store_path": "no-store", "retrieve_prob": 0.5}, [], ["store path 'no-store' does not exist"]),
    # a range RAPOConfig refuses is refused before its imports; the unknown task before its knobs
    "out_of_range": (None, ["--retrieve_prob", "2"], ["retrieve_prob must be in [0.0, 1.0], got 2"]),
    "unknown_task": ({"task": "wordproblems", "task_difficulty": 1}, [],
                     ["unknown task 'wordproblems'", "did you mean 'word_problems'?"]),
    "lora_rank_key": ({"lora_rank": 8}, [], ["unknown key 'lora_rank'", "did you mean 'lora_r'?"]),
    "lora_rank_flag": (None, ["--lora_rank", "8"], ["unrecognized arguments: --lora_rank", "did you mean --lora_r?"]),
    "replaced_key": ({"retrieve_when": ["plan"]}, [], ["'retrieve_when': retrieve_when was replaced by retrieve_at",
                                                       "retrieve_failed_groups_max_reward"]),
    "merged_key": ({"dynamic_sampling": True}, [], ["'dynamic_sampling': dynamic_sampling was replaced by "
                                                    "dynamic_sampling_max_rounds (0: off"]),
    "store_key": ({"retrieval_top_k": 3}, [], ["retrieval_top_k was moved to the trace store's own settings: "
                                               "StoreConfig.top_k"]),
    "removed_flag": (None, ["--share_prompt_forward", "false"], ["share_prompt_forward was removed"]),
    "replaced_flag": (None, ["--retrieve_when", "plan"], ["retrieve_when was replaced by retrieve_at"]),
}


@pytest.mark.parametrize("name", list(RECIPE_ERRORS))
def test_recipe_errors_answer_at_once(name, recipe_file, tmp_path):
    changes, extra, words = RECIPE_ERRORS[name]
    config = recipe_file
    if changes:
        import yaml

        config = write_yaml(tmp_path / f"{name}.yaml", {**yaml.safe_load(recipe_file.read_text()), **changes})
    args = extra if "--config" in extra else ["--config", config, *extra]
    run, seconds = timed("train", *args, cwd=tmp_path)
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1, describe(run)
    assert seconds < BOUND_S, f"{name}: the error took {seconds:.1f}s"
    for word in words:
        assert word in lines[0], f"{word!r} not in {lines[0]!r}"


def test_parsing_and_early_errors_import_neither_torch_nor_trl(recipe_file, tmp_path):
    """`import rapo_trl.cli`, every command's help, a full parse and the early errors, in a fresh process."""
    bad = write_yaml(tmp_path / "bad.yaml", {"lora_rank": 8})
    code = textwrap.dedent(f"""
        import contextlib, io, sys
        from rapo_trl.cli import main, read_recipe
        from rapo_trl.cli.recipe import recipe_parser

        script, training, model = read_recipe("train", ["--config", {str(recipe_file)!r}, "--bf16", "--max_steps", "3",
                                                        "--dtype", "bfloat16", "--lora-r", "8"])
        assert (training.bf16, training.max_steps, model.dtype, model.lora_r) == (True, 3, "bfloat16", 8)
        assert script.store_path.endswith("store") and training.use_cpu is True
        for command in ("train", "eval", "build-store"):
            recipe_parser(command, everything=True).format_help()
        with contextlib.redirect_stderr(io.StringIO()):
            assert main(["train", "--config", {str(bad)!r}]) == 2
            assert main(["train", "--config", {str(recipe_file)!r}, "--retrieve_prob", "0.5"]) == 2  # no store
        print(sorted(name for name in ("torch", "transformers", "trl") if name in sys.modules))
    """)
    run = subprocess.run([sys.executable, "-c", code], env=rapo_env(), capture_output=True, text=True, timeout=60,
                         cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().splitlines()[-1] == "[]", run.stdout


def test_bare_bool_flag_is_true(recipe_file):
    """`--bf16` (a `bool | None` field) takes no value, as with transformers; `--bf16 false` still works."""
    from rapo_trl.cli import parse_recipe

    _, args, _ = parse_recipe("train", ["--config", str(recipe_file), "--bf16", "--disable_tqdm"])
    assert args.bf16 is True and args.disable_tqdm is True
    _, args, _ = parse_recipe("train", ["--config", str(recipe_file), "--bf16", "false"])
    assert args.bf16 is False


def test_retrieve_at_takes_every_trigger_on_the_command_line_and_in_yaml(recipe_file, tmp_path):
    from rapo_trl.cli import parse_recipe

    flags = ["--retrieve_at", "plan", "first_tool_step"]
    assert parse_recipe("train", ["--config", str(recipe_file), *flags])[1].retrieve_at == ["plan", "first_tool_step"]
    in_yaml = write_yaml(tmp_path / "first.yaml", {**yaml.safe_load(recipe_file.read_text()),
                                                   "retrieve_at": "first_tool_step"})
    assert parse_recipe("train", ["--config", str(in_yaml)])[1].retrieve_at == ["first_tool_step"]
    prefix = parse_recipe("train", ["--config", str(recipe_file), "--retrieve_at", "start", "--retrieved_step_as_own",
                                    "true"])[1]
    assert prefix.retrieve_at == ["start"] and prefix.retrieved_step_as_own is True


@pytest.mark.parametrize("value", ["null", "none", "None"])
def test_null_unsets_an_optional_number_on_the_command_line_and_in_yaml(recipe_file, tmp_path, value):
    """`--retrieved_token_shaping null` (and YAML `null`) is log-likelihood, no shaping; both parsers agree."""
    from rapo_trl.cli import parse_recipe, read_recipe

    flags = ["--retrieved_token_shaping", value, "--advantage_baseline", "on_policy"]
    _, training, _ = read_recipe("train", ["--config", str(recipe_file), *flags])
    _, args, _ = parse_recipe("train", ["--config", str(recipe_file), *flags])
    assert training.retrieved_token_shaping is None and args.retrieved_token_shaping is None
    assert args.advantage_baseline == "on_policy"
    in_yaml = write_yaml(tmp_path / "null.yaml", {**yaml.safe_load(recipe_file.read_text()),
                                                  "retrieved_token_shaping": None})
    assert parse_recipe("train", ["--config", str(in_yaml)])[1].retrieved_token_shaping is None
    assert parse_recipe("train", ["--config", str(recipe_file)])[1].retrieved_token_shaping == 0.1


@pytest.mark.parametrize("argv, meant", [
    (["train", "--config", "RECIPE", "--learning_rat", "1e-4"], "--learning_rate"),  # a prefix of a field
    (["eval", "--config", "RECIPE", "--eval_sample", "2"], "--eval_samples"),
    (["store", "query", "STORE", "text", "--top", "3"], "--top[_-]k"),
    (["store", "stats", "STORE", "--collect", "x"], "--collection"),
    (["plot", "RUN", "--dp", "100"], "--dpi"),
])
def test_no_prefix_matching_and_a_suggestion(argv, meant, recipe_file, tmp_path, capsys):
    from rapo_trl.cli import main

    places = {"RECIPE": str(recipe_file), "STORE": str(tmp_path), "RUN": str(tmp_path)}
    with pytest.raises(SystemExit) as exited:
        main([places.get(arg, arg) for arg in argv])
    lines = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 2 and len(lines) == 1, lines
    assert "unrecognized arguments" in lines[0] and re.search(f"did you mean {meant}\\?", lines[0]), lines[0]


def test_mistyped_command_gets_a_suggestion(capsys):
    from rapo_trl.cli import main

    with pytest.raises(SystemExit):
        main(["trian", "--config", "x.yaml"])
    assert "did you mean train?" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--top_k", "--top-k"])
def test_store_query_takes_both_spellings(flag):
    from rapo_trl.cli import build_parser

    assert build_parser().parse_args(["store", "query", "store", "text", flag, "3"]).top_k == 3


def test_every_option_of_every_command_has_help():
    import argparse

    from rapo_trl.cli import build_parser

    def options(parser, prog):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from options(sub, f"{prog} {name}")
            elif not isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                yield prog, action

    missing = [f"{prog} {action.dest}" for prog, action in options(build_parser(), "rapo") if not action.help]
    assert not missing


def test_rapo_traceback_is_documented_and_works(recipe_file, tmp_path, monkeypatch):
    from rapo_trl.cli import build_parser, main

    assert "RAPO_TRACEBACK" in build_parser().format_help()
    bad = write_yaml(tmp_path / "bad.yaml", {"lora_rank": 8})
    monkeypatch.setenv("RAPO_TRACEBACK", "1")
    with pytest.raises(ValueError, match="unknown key 'lora_rank'"):
        main(["train", "--config", str(bad)])


def _calls_of(function, monkeypatch) -> list:
    """Wraps ``function`` under every name a loaded ``rapo_trl.cli`` module holds it by (a module that imported it
    holds its own); returns the list each call appends its first argument to."""
    calls = []

    def counted(*args, **kwargs):
        calls.append(args[0])
        return function(*args, **kwargs)

    for name, module in list(sys.modules.items()):
        if name.startswith("rapo_trl.cli") and getattr(module, function.__name__, None) is function:
            monkeypatch.setattr(module, function.__name__, counted)
    return calls


def test_train_checks_the_script_arguments_once(recipe_file, monkeypatch):
    """`rapo train` reads its command line twice (first without TRL, then by TRL's parser) and checks it early and
    again as it runs; the script's arguments, whose check reads a JSONL dataset whole, are checked once all the same."""
    from rapo_trl.cli import build_store, common, evaluate, main, train  # noqa: F401 - each holds its names to wrap

    class ModelLoads(Exception):
        pass

    def model_loads(*args, **kwargs):
        raise ModelLoads

    calls = _calls_of(common.check_script_arguments, monkeypatch)
    monkeypatch.setattr(train, "load_policy_source", model_loads)  # every check comes before the model loads
    monkeypatch.setenv("RAPO_TRACEBACK", "1")  # the stop raised as it is, not reported as an error line
    with pytest.raises(ModelLoads):
        main(["train", "--config", str(recipe_file), "--retrieve_prob", "0"])
    assert calls == ["train"]


@pytest.mark.parametrize("entry", ["rapo train", "train.run"])
def test_train_runs_its_checks_once(recipe_file, monkeypatch, entry):
    """The command's check (the store opened, the model looked up) runs once, before TRL loads, on the command line;
    a Python caller of `train.run` gets it too."""
    from rapo_trl.cli import main, parse_recipe, train

    class ModelLoads(Exception):
        pass

    def model_loads(*args, **kwargs):
        raise ModelLoads

    checked = []
    check = train.check
    monkeypatch.setattr(train, "check", lambda *args: checked.append(args) or check(*args))
    monkeypatch.setattr(train, "load_policy_source", model_loads)  # every check comes before the model loads
    monkeypatch.setenv("RAPO_TRACEBACK", "1")  # the stop raised as it is, not reported as an error line
    argv = ["--config", str(recipe_file), "--retrieve_prob", "0"]
    with pytest.raises(ModelLoads):
        if entry == "rapo train":
            main(["train", *argv])
        else:
            train.run(*parse_recipe("train", argv))
    assert len(checked) == 1


def test_eval_without_output_dir_looks_where_train_saves_by_default(tmp_path):
    """No output_dir: TrainingArguments' default ("trainer_output", set only in its __post_init__) is the model."""
    run = rapo("eval", "--model_name_or_path", "tiny", cwd=tmp_path)
    assert run.returncode == 2, describe(run)
    assert "eval model 'trainer_output' does not exist; train first or set eval_model" in run.stderr, describe(run)


def test_eval_takes_the_tiny_alias_as_its_model(tmp_path):
    """`rapo eval --eval_model tiny` is the smoke test the rest of the CLI's `tiny` alias is."""
    from rapo_trl.cli import evaluate, read_recipe

    evaluate.check(*read_recipe("eval", ["--eval_model", "tiny", "--model_name_or_path", "tiny",
                                         "--output_dir", str(tmp_path / "none")]))


def test_eval_refuses_a_folder_that_is_not_a_model_before_evaluating_anything(tmp_path):
    """A trace store given as the eval model: refused at once, not after the base model's evaluation."""
    store = tmp_path / "store"
    store.mkdir()
    (store / "chroma.sqlite3").write_bytes(b"SQLite format 3\0")
    run, seconds = timed("eval", "--model_name_or_path", "tiny", "--eval_model", store, cwd=tmp_path)
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1 and seconds < BOUND_S, describe(run)
    assert f"eval model: '{store}' is not a model folder (no config.json or adapter_config.json)" in lines[0]


BAD_EVAL_MODELS = {  # files of the folder -> words of the error
    "stopped_run": ({"checkpoint-2/config.json": '{"model_type": "qwen2"}', "checkpoint-10/config.json":
                     '{"model_type": "qwen2"}', "log.jsonl": ""}, ["is not a model folder", "checkpoint-10 (the newest)"]),
    "no_weights": ({"config.json": '{"model_type": "qwen2"}'}, ["has a config.json but no weights (model.safetensors"]),
    "cut_config": ({"config.json": '{"model_ty', "model.safetensors": ""}, ["config.json cannot be read"]),
    "not_transformers": ({"config.json": '{"dim": 8}', "model.safetensors": ""}, ["has no model_type"]),
    "adapter_without_weights": ({"adapter_config.json": "{}"}, ["has a adapter_config.json but no adapter weights"]),
}


@pytest.mark.parametrize("name", list(BAD_EVAL_MODELS))
def test_eval_refuses_a_bad_model_folder_from_its_files(name, tmp_path):
    from rapo_trl.cli import evaluate, read_recipe

    files, words = BAD_EVAL_MODELS[name]
    folder = tmp_path / "model"
    for relative, text in files.items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text(text)
    with pytest.raises(UsageError) as caught:
        evaluate.check(*read_recipe("eval", ["--eval_model", str(folder), "--model_name_or_path", "tiny"]))
    for word in words:
        assert word in str(caught.value), str(caught.value)
    for weights in ("model.safetensors", "adapter_model.safetensors"):  # weights beside a readable config: it passes
        (folder / weights).write_text("")
    (folder / "config.json").write_text('{"model_type": "qwen2"}')
    evaluate.check(*read_recipe("eval", ["--eval_model", str(folder), "--model_name_or_path", "tiny"]))
