"""`rapo --help`, `--version` and a recipe command's help, through the real command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rapo_trl import __version__
from tests.cli.runs import describe, rapo, rapo_env


def test_help_lists_every_command():
    run = rapo("--help")
    assert run.returncode == 0, describe(run)
    for command in ("build-store", "train", "eval", "store", "plot"):
        assert command in run.stdout
    assert "RAPO_TRACEBACK" in run.stdout  # how to get the traceback behind a one-line error
    assert run.stderr == ""


def test_no_command_prints_help():
    run = rapo()
    assert run.returncode == 0, describe(run)
    assert run.stdout.startswith("usage: rapo")


def test_version():
    run = rapo("--version")
    assert run.returncode == 0, describe(run)
    assert run.stdout.strip() == f"rapo_trl {__version__}"


def test_console_script():
    script = Path(sys.executable).with_name("rapo")
    if not script.exists():
        pytest.skip(f"no `rapo` console script next to {sys.executable} (package not installed)")
    run = subprocess.run([str(script), "--version"], env=rapo_env(), capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == f"rapo_trl {__version__}"


def test_store_help():
    run = rapo("store", "--help")
    assert run.returncode == 0, describe(run)
    assert "stats" in run.stdout and "query" in run.stdout


def test_train_help_lists_fields_of_all_three_dataclasses():
    run = rapo("train", "--help")
    assert run.returncode == 0, describe(run)
    assert run.stdout.startswith("usage: rapo train")
    # RAPOScriptArguments, RAPOConfig (RAPO's own and GRPO's fields) and TRL's ModelConfig
    for option in ("--store_path", "--retrieve_prob", "--retrieval_advantage_weight", "--num_generations",
                   "--max_steps", "--model_name_or_path", "--use_peft"):
        assert option in run.stdout, option


@pytest.mark.parametrize("command", ["train", "build-store", "eval"])
def test_every_recipe_command_help_shows_config(command):
    """TrlParser reads `--config` without declaring it; each recipe command's help must still show it."""
    run = rapo(command, "--help")
    assert run.returncode == 0, describe(run)
    assert run.stdout.startswith(f"usage: rapo {command} [-h] [--config FILE.yaml]"), run.stdout[:300]
    options = run.stdout.split("\noptions:\n", 1)[1]
    assert "--config FILE.yaml YAML recipe" in " ".join(options.split()), options[:600]


def test_eval_help_states_one_precision_rule_under_device_and_dtype():
    """`--device` once said the CPU runs fp32 while `--dtype` said bf16 on CPUs with AVX512-BF16: both now
    give default_precision's rule, and neither another one."""
    from rapo_trl.hardware import PRECISION_RULE

    run = rapo("eval", "--help")
    assert run.returncode == 0, describe(run)
    options = " ".join(run.stdout.split())
    sections = {}
    for option in ("--device DEVICE", "--dtype {auto,bfloat16,float16,float32}"):
        start = options.index(option)
        sections[option] = options[start:options.index(" --", start + len(option))]
    rule = " ".join(PRECISION_RULE.split())
    for option, text in sections.items():
        assert rule in text, (option, text)
        assert "CPU (fp32)" not in text and "fp16 without bf16" not in text, (option, text)
