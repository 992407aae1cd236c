"""Bad input to the real command line: exit code != 0 and one line on stderr that names what to fix.

The command lines are in conftest.bad_input_runs; this table says what each must print.
"""

from __future__ import annotations

import pytest

from tests.cli.runs import describe

pytestmark = pytest.mark.slow

CASES = {
    # name: (stderr prefix, words the line must contain)
    "unknown_key": ("rapo train: error:", ["unknown key 'lora_rank'", "spelling"]),
    "wrong_type": ("rapo train: error:", ["'max_steps'", "'ten'", "wrong type", "expected int"]),
    "override_type": ("rapo train: error:", ["--max_steps", "invalid int value: 'ten'", "rapo train --help"]),
    "jsonl_columns": ("rapo train: error:", ["qa.jsonl", "'question'", "'answer'", "problem, solution",
                                             "question_column", "answer_column"]),
    "missing_store": ("rapo train: error:", ["store path", "no-store", "does not exist", "rapo build-store"]),
    "missing_model": ("rapo train: error:", ["model path", "no-model", "does not exist"]),
    "missing_config": ("rapo train: error:", ["cannot read config", "no-such-recipe.yaml", "No such file"]),
    "config_without_path": ("rapo eval: error:", ["--config needs the path of a YAML file"]),
    "config_not_yaml": ("rapo build-store: error:", ["broken.yaml", "not valid YAML"]),
    "store_stats_missing": ("rapo store: error:", ["store path", "no-store", "does not exist"]),
    "store_is_file": ("rapo train: error:", ["store path", "store-file", "is a file, not a store folder"]),
    "wrong_collection": ("rapo train: error:", ["no collection 'no-such-collection'", "its collections: traces",
                                                "store_collection", "rapo build-store"]),
    "store_stats_file": ("rapo store: error:", ["store path", "store-file", "is a file, not a store folder"]),
    "build_store_file": ("rapo build-store: error:", ["store path", "store-file", "is a file, not a store folder"]),
    "train_size_zero": ("rapo train: error:", ["train_size must be >= 1", "got 0"]),
    "eval_size_zero": ("rapo eval: error:", ["eval_size must be >= 1", "got 0"]),
    "num_generations_zero": ("rapo train: error:", ["num_generations must be >= 2", "got 0"]),
    "max_completion_negative": ("rapo train: error:", ["max_completion_length must be >= 1", "got -5"]),
    "no_config": ("rapo train: error:", ["no model given", "model_name_or_path"]),
}


@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.rapo_runs(name)) for name in CASES])
def test_bad_input_fails_with_one_clear_line(cli_runs, name):
    prefix, words = CASES[name]
    run = cli_runs[name]
    assert run.returncode != 0, describe(run)
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, describe(run)
    assert lines[0].startswith(prefix), describe(run)
    for word in words:
        assert word in lines[0], f"{word!r} not in {lines[0]!r}"
    assert "Traceback" not in run.stderr + run.stdout


# In-process, with every heavy loader patched to fail: the line must come before any of them runs.
EARLY_CASES = {
    # name: (command, recipe changes, words the line must contain)
    "store_is_file": ("train", {"store_path": "FILE", "retrieve_prob": 0.5}, ["is a file, not a store folder"]),
    "missing_store": ("train", {"store_path": "MISSING", "retrieve_prob": 0.5}, ["does not exist"]),
    "build_store_file": ("build-store", {"store_path": "FILE", "agent": "MODEL"}, ["is a file, not a store folder"]),
    "train_size_zero": ("train", {"train_size": 0}, ["train_size must be >= 1"]),
    "build_store_train_size_zero": ("build-store", {"train_size": 0}, ["train_size must be >= 1"]),
    # 0 builds nothing; on a store built before, the command would end as if it had succeeded
    "build_store_num_samples_zero": ("build-store", {"num_samples": 0}, ["num_samples must be >= 1", "got 0"]),
    "build_store_keep_top_k_zero": ("build-store", {"keep_top_k": 0}, ["keep_top_k must be >= 1", "got 0"]),
    "learning_rate_negative": ("train", {"learning_rate": -1.0}, ["learning_rate must be >= 0.0", "got -1.0"]),
    "sft_batch_size_zero": ("train", {"sft_warmup_steps": 1, "sft_batch_size": 0}, ["sft_batch_size must be >= 1"]),
    "sft_learning_rate_negative": ("train", {"sft_warmup_steps": 1, "sft_learning_rate": -1.0},
                                   ["sft_learning_rate must be >= 0", "got -1.0"]),
    # Trainer would take one step at a learning rate of 0 and call the run trained
    "max_steps_zero": ("train", {"max_steps": 0}, ["max_steps must be >= 1, or -1", "got 0"]),
    "eval_size_zero": ("eval", {"eval_size": 0}, ["eval_size must be >= 1"]),
    "eval_batch_size_zero": ("eval", {"eval_batch_size": 0}, ["eval_batch_size must be >= 1", "got 0"]),
    # no question would be sampled, and mean@k would read 0.000 (0.000-0.000)
    "eval_sample_size_zero": ("eval", {"eval_samples": 2, "eval_sample_size": 0}, ["eval_sample_size must be >= 1"]),
    "eval_temperature_zero": ("eval", {"eval_samples": 2, "eval_temperature": 0.0}, ["eval_temperature must be > 0"]),
    "eval_scoring_unknown": ("eval", {"eval_scoring": "fuzzy"}, ["eval_scoring must be one of auto, math, exact"]),
    # a misspelled name would leave mean@k out of every table, without a word
    "eval_sampled_model_unknown": ("eval", {"eval_samples": 2, "eval_sampled_models": ["trained_model"]},
                                   ["eval_sampled_models names 'trained_model'", "trained"]),
    "eval_sampled_split_unknown": ("eval", {"eval_samples": 2, "eval_sampled_splits": "test"},
                                   ["eval_sampled_splits names 'test'", "not one of eval"]),
    "num_generations_zero": ("train", {"num_generations": 0}, ["num_generations must be >= 2"]),
    "max_completion_negative": ("train", {"max_completion_length": -5}, ["max_completion_length must be >= 1"]),
    "closeness_negative": ("train", {"closeness_weight": -0.5}, ["closeness_weight must be >= 0", "got -0.5"]),
    "closeness_with_weights": ("train", {"closeness_weight": 0.5, "reward_weights": [1.0]},
                               ["set closeness_weight or reward_weights, not both"]),
}


@pytest.mark.parametrize("name", list(EARLY_CASES))
def test_bad_input_fails_before_anything_heavy_loads(name, tmp_path, monkeypatch, capsys):
    import transformers

    from rapo_trl.cli import main
    from rapo_trl.rollout.agent import RolloutAgent
    from rapo_trl.store import TraceStore
    from tests.cli.conftest import recipe, write_yaml

    def loaded(what):
        def fail(*args, **kwargs):
            raise AssertionError(f"{what} loaded before the bad input was reported")
        return fail

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", loaded("the tokenizer"))
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", loaded("the model"))
    monkeypatch.setattr(RolloutAgent, "from_pretrained", loaded("the agent model"))
    monkeypatch.setattr(TraceStore, "__init__", loaded("the store"))
    model = tmp_path / "model"
    model.mkdir()
    (tmp_path / "store").mkdir()  # the recipe's store: only the case that names another may fail on it
    (tmp_path / "store-file").write_text("not a store\n")
    places = {"FILE": str(tmp_path / "store-file"), "MISSING": str(tmp_path / "no-store"), "MODEL": str(model)}
    command, changes, words = EARLY_CASES[name]
    config = {**recipe(model, tmp_path), **{k: places.get(v, v) if isinstance(v, str) else v for k, v in changes.items()}}
    code = main([command, "--config", str(write_yaml(tmp_path / "recipe.yaml", config))])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code != 0 and len(lines) == 1, err
    assert lines[0].startswith(f"rapo {command}: error:") and "loaded before" not in lines[0], lines[0]
    for word in words:
        assert word in lines[0], f"{word!r} not in {lines[0]!r}"
