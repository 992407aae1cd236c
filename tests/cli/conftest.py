"""The ``rapo`` command lines that tests/cli checks, declared once and run together (see runs.py).

One store is built, one LoRA model trained on it and evaluated, one SFT warm start + RAPO + equal-time SFT
run trained on it and evaluated, one full fine-tune trained without a store; every bad-input case is its own
command line. All on the tiny model with tiny budgets.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest
import yaml

from tests.cli.runs import CliRuns, Run

TRAIN_SIZE = 6
EVAL_SIZE = 2

BASELINE_REWARDS = """
import multiprocessing


def varied(completions, **kwargs):
    # the tiny model never answers right; this differs between a group's completions, so the steps update the policy
    return [float(sum(map(ord, str(completion))) % 7) for completion in completions]


def fails_in_a_second_process(completions, **kwargs):
    if multiprocessing.parent_process() is not None:
        raise RuntimeError("this reward fails in the GRPO baseline's process")
    return [0.0 for _ in completions]
"""
"""``baseline_rewards.py`` in the runs' folder: rewards the GRPO baseline runs name by import path."""


def recipe(tiny_model_dir, work) -> dict:
    """A complete tiny recipe: the YAML a user would write, sized for seconds on a CPU."""
    return {
        # TRL ModelConfig
        "model_name_or_path": str(tiny_model_dir),
        "use_peft": True,
        "lora_r": 4,
        "lora_alpha": 8,
        "lora_target_modules": ["q_proj", "v_proj"],
        # RAPOScriptArguments
        "task": "arithmetic",
        "train_size": TRAIN_SIZE,
        "eval_size": EVAL_SIZE,
        "store_path": str(work / "store"),
        "agent": "expert",
        "num_samples": 2,
        "keep_top_k": 1,
        "eval_batch_size": EVAL_SIZE,
        # RAPOConfig
        "output_dir": str(work / "model-lora"),
        "use_cpu": True,
        "bf16": False,
        "seed": 0,
        "max_steps": 1,
        "per_device_train_batch_size": 2,
        "num_generations": 2,
        "retrieve_prob": 1.0,
        "max_completion_length": 32,
        "max_turn_tokens": 16,
        "learning_rate": 1.0e-4,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
    }


def write_yaml(path, config: dict):
    return write_file(path, yaml.safe_dump(config, sort_keys=False))


def write_file(path, text: str):
    """``text`` at ``path``, left as it is when it already holds it: under pytest-xdist every worker builds the run
    table in the folder they share, and a rewrite would empty the file for a moment under a run reading it."""
    if not path.is_file() or path.read_text() != text:
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_text(text)
        partial.replace(path)
    return path


def first_train_question() -> str:
    from rapo_trl.tasks import load_task

    return load_task("arithmetic", split="train", n=TRAIN_SIZE, seed=0)[0]["question"]


def bad_input_runs(work, base: dict) -> dict[str, Run]:
    """One command line per kind of bad input (the table test_bad_input.py checks)."""
    bad = work / "bad"
    bad.mkdir(exist_ok=True)
    jsonl = write_file(bad / "qa.jsonl", "".join(json.dumps({"problem": f"{i} + {i}?", "solution": str(2 * i)}) + "\n"
                                                 for i in range(4)))
    store_file = write_file(bad / "store-file", "not a store\n")
    configs = {
        "unknown_key": {**base, "lora_rank": 8},
        "wrong_type": {**base, "max_steps": "ten"},
        "jsonl_columns": {**base, "task": "jsonl", "dataset_path": str(jsonl), "retrieve_prob": 0.0},
        "missing_store": {**base, "store_path": str(bad / "no-store"), "retrieve_prob": 0.5},
        "missing_model": {**base, "model_name_or_path": str(bad / "no-model")},
        "store_is_file": {**base, "store_path": str(store_file), "retrieve_prob": 0.5},
        "train_size_zero": {**base, "train_size": 0},
        # RAPOConfig's own checks, when the command runs: without a store to find first (it may not be built yet)
        "num_generations_zero": {**base, "num_generations": 0, "retrieve_prob": 0.0},
        "max_completion_negative": {**base, "max_completion_length": -5, "retrieve_prob": 0.0},
    }
    runs = {name: Run(("train", "--config", write_yaml(bad / f"{name}.yaml", config)))
            for name, config in configs.items()}
    runs["override_type"] = Run(("train", "--config", work / "recipe.yaml", "--max_steps", "ten"))
    runs["missing_config"] = Run(("train", "--config", bad / "no-such-recipe.yaml"))
    runs["config_without_path"] = Run(("eval", "--config"))
    write_file(bad / "broken.yaml", "max_steps: [1\n")
    runs["config_not_yaml"] = Run(("build-store", "--config", bad / "broken.yaml"))
    runs["store_stats_missing"] = Run(("store", "stats", bad / "no-store"))
    runs["store_stats_file"] = Run(("store", "stats", store_file))
    runs["build_store_file"] = Run(("build-store", "--config", write_yaml(
        bad / "build_store_file.yaml", {**base, "store_path": str(store_file)})))
    runs["wrong_collection"] = Run(("train", "--config", write_yaml(
        bad / "wrong_collection.yaml", {**base, "store_collection": "no-such-collection", "retrieve_prob": 0.5})),
        after="build-store")  # the store is there, the collection is not
    runs["eval_size_zero"] = Run(("eval", "--config", write_yaml(bad / "eval_size_zero.yaml",
                                                                 {**base, "eval_size": 0})))
    runs["no_config"] = Run(("train",))
    return runs


def shared_folder(tmp_path_factory) -> Path | None:
    """The folder every pytest-xdist worker of this session can reach (the parent of the workers' own temporary
    folders); ``None`` without xdist."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return None
    return tmp_path_factory.getbasetemp().parent


@pytest.fixture(scope="session")
def cli_work(tmp_path_factory, tiny_model_dir):
    """The folder the runs work in, with ``recipe.yaml`` (the tiny recipe) and the recipe as a dict. Under xdist one
    folder for all workers, made by the first (its tiny model the recipe's), so that each run runs once."""
    shared = shared_folder(tmp_path_factory)
    if shared is None:
        work = tmp_path_factory.mktemp("rapo-cli")
        base = recipe(tiny_model_dir, work)
        write_yaml(work / "recipe.yaml", base)
        return work, base
    work = shared / "rapo-cli"
    with open(shared / "rapo-cli.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        made = work / "recipe.json"
        if not made.is_file():
            work.mkdir(exist_ok=True)
            base = recipe(tiny_model_dir, work)
            write_yaml(work / "recipe.yaml", base)
            write_file(made, json.dumps(base))
        return work, json.loads(made.read_text())


def pytest_configure(config):
    config.addinivalue_line("markers", "rapo_runs(*names): the `cli_runs` command lines a test reads")


@pytest.fixture(scope="session")
def cli_runs(request, cli_work, tmp_path_factory):
    """The command lines of tests/cli; ``cli_runs[name]`` waits for one. Those the selected tests
    name with ``@pytest.mark.rapo_runs`` all start on first use, so independent ones overlap."""
    work, base = cli_work
    wanted = {name for item in request.session.items for mark in item.iter_markers("rapo_runs")
              for name in mark.args}
    recipe_yaml = work / "recipe.yaml"
    write_file(work / "baseline_rewards.py", BASELINE_REWARDS)
    # SFT warm start -> RAPO -> equal-time SFT baseline (an adapter over the warm start) -> the GRPO baseline
    # (retrieval off) from the same warm start, trained after RAPO; and the same run with the baseline alongside
    # RAPO on one core (one torch thread in each process, as the run after RAPO has: OMP_NUM_THREADS=1)
    sft_run = ("train", "--config", recipe_yaml, "--sft_warmup_steps", "1", "--sft_batch_size", "2",
               "--sft_same_time", "true", "--grpo_same_rollouts", "true", "--max_steps", "2",
               "--reward", "baseline_rewards.varied")
    table = {
        # the chain: store -> LoRA training with retrieval from it -> evaluation beside the base model
        "build-store": Run(("build-store", "--config", recipe_yaml), side=False),
        "train-lora": Run(("train", "--config", recipe_yaml), after="build-store", side=False),
        "eval": Run(("eval", f"--config={recipe_yaml}"), after="train-lora", side=False),
        "store-stats": Run(("store", "stats", base["store_path"]), after="build-store"),
        "store-query": Run(("store", "query", base["store_path"], first_train_question, "--top_k", "3"),
                           after="build-store"),
        # the SFT-started run and its baselines (sft_run), all evaluated
        "train-sft": Run((*sft_run, "--output_dir", work / "model-sft"), after="build-store"),
        # ... with mean@2 on two questions at a temperature of its own, for the trained model only
        "eval-sft": Run(("eval", "--config", recipe_yaml, "--output_dir", work / "model-sft", "--eval_base", "false",
                         "--eval_splits", "eval", "--eval_samples", "2", "--eval_sample_size", "2",
                         "--eval_temperature", "0.4",
                         "--eval_sampled_models", "trained"), after="train-sft"),
        # full fine-tune, CLI overrides over the YAML, p = 0 so no store is needed (and none exists there),
        # numeric closeness added to the training reward
        "train-full": Run(("train", "--config", recipe_yaml, "--use_peft", "false", "--retrieve_prob", "0",
                           "--store_path", work / "never-built", "--output_dir", work / "model-full",
                           "--closeness_weight", "0.5")),
        "train-grpo-alongside": Run((*sft_run, "--grpo_alongside", "true", "--output_dir", work / "grpo-alongside"),
                                    after="build-store", one_core=True),
        # no store needed: retrieval off, no warm start
        "train-grpo-alongside-fails": Run(("train", "--config", recipe_yaml, "--retrieve_prob", "0",
                                           "--grpo_same_rollouts", "true", "--grpo_alongside", "true",
                                           "--reward", "baseline_rewards.fails_in_a_second_process",
                                           "--store_path", work / "never-built",
                                           "--output_dir", work / "grpo-alongside-fails")),
        **bad_input_runs(work, base),
    }
    results = None
    if shared_folder(tmp_path_factory) is not None:
        results = work / "results"
        results.mkdir(exist_ok=True)
    runs = CliRuns(table, cwd=work, wanted=wanted, results=results)
    yield runs
    runs.close()
