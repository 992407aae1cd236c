"""The single-GPU recipe (configs/qwen_gpu.yaml) and scripts/gpu_recipe.sh, checked on the CPU: the recipe parses,
its precision, LoRA and dtype flags reach the loads, its questions load, and the script runs build-store, train
(under `accelerate launch` for several GPUs) and eval on it. It has not run on a GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from trl import get_peft_config

from rapo_trl.cli import read_recipe
from rapo_trl.cli.common import load_questions, model_init_kwargs

ROOT = Path(__file__).parent.parent
RECIPE = ROOT / "configs" / "qwen_gpu.yaml"


def test_recipe_parses_and_its_flags_reach_the_loads():
    script, training, model = read_recipe("train", ["--config", str(RECIPE)])
    assert model.model_name_or_path == "Qwen/Qwen2.5-0.5B-Instruct"  # a hub id: nothing to prepare by hand
    assert not training.use_cpu
    assert model_init_kwargs(model, training) == {"revision": "main", "trust_remote_code": False}
    peft = get_peft_config(model)
    assert peft.r == 16 and "down_proj" in peft.target_modules
    assert training.per_device_train_batch_size * training.gradient_accumulation_steps == training.num_generations
    assert len(load_questions(script, "train")) == script.train_size
    assert len(load_questions(script, "demo")) > 0


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_precision_follows_the_device_as_in_the_notebook(precision, monkeypatch):
    """The recipe sets neither bf16 nor fp16 (nor dtype), so RAPOConfig takes the device's rule, the one
    the notebook uses: bf16 where the GPU computes it natively, fp16 on a T4/V100 (no "use_cpu" error there)."""
    import rapo_trl.config

    script, training, model = read_recipe("train", ["--config", str(RECIPE)])
    assert training.bf16 is None and not training.fp16 and model.dtype is None
    monkeypatch.setattr(rapo_trl.config, "trainer_device", lambda use_cpu: "cuda")
    monkeypatch.setattr(rapo_trl.config, "default_precision", lambda device: precision)
    config = object.__new__(rapo_trl.config.RAPOConfig)  # only the precision rule of __post_init__, not a GPU check
    config.bf16, config.fp16, config.use_cpu = training.bf16, training.fp16, training.use_cpu
    with pytest.raises(Exception):  # noqa: B017, PT011 - what follows the rule (TrainingArguments' checks) needs the fields
        rapo_trl.config.RAPOConfig.__post_init__(config)
    assert (config.bf16, config.fp16) == (precision == "bf16", precision == "fp16")


def _dry_run(nproc: str, python: str | None = sys.executable, venv: Path | None = None) -> list[str]:
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHON", "RAPO_VENV")}
    env.update({"RAPO_DRY_RUN": "1", "NPROC": nproc, **({"PYTHON": python} if python else {}),
                **({"RAPO_VENV": str(venv)} if venv else {})})
    run = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_recipe.sh")], env=env, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    return run.stdout.splitlines()


def test_script_prepares_the_store_then_trains_and_evaluates_with_the_venvs_python(tmp_path):
    """Every command runs with the venv's interpreter (no bare `python`/`rapo` needing an activated venv)."""
    one = _dry_run("1")
    assert "snapshot_download('Qwen/Qwen2.5-0.5B-Instruct')" in one[0]
    assert one[1:] == [f"{sys.executable} -m rapo_trl.cli {command} --config configs/qwen_gpu.yaml"
                       for command in ("build-store", "train", "eval")]
    several = _dry_run("4")
    assert several[2] == (f"{sys.executable} -m accelerate.commands.launch --num_processes 4 -m rapo_trl.cli train "
                          "--config configs/qwen_gpu.yaml")
    venv = tmp_path / "venv"  # no PYTHON given: the venv's (.venv, or RAPO_VENV), not whatever is on PATH
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    default = _dry_run("1", python=None, venv=venv)
    assert all(line.startswith(f"{venv}/bin/python ") for line in default), default
