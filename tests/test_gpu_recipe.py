"""The single-GPU recipe (configs/qwen_gpu.yaml) and scripts/gpu_recipe.sh, checked on the CPU: the recipe parses,
its precision, LoRA and dtype flags reach the loads, its questions load, and the script runs build-store, train
(under `accelerate launch` for several GPUs) and eval on it (issue 35). It has not run on a GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from trl import get_peft_config

from rapo_trl.cli import read_recipe
from rapo_trl.cli.common import load_questions, model_init_kwargs

ROOT = Path(__file__).parent.parent
RECIPE = ROOT / "configs" / "qwen_gpu.yaml"


def test_recipe_parses_and_its_flags_reach_the_loads():
    script, training, model = read_recipe("train", ["--config", str(RECIPE)])
    assert model.model_name_or_path == "Qwen/Qwen2.5-0.5B-Instruct"  # a hub id: nothing to prepare by hand
    assert training.bf16 is True and not training.use_cpu
    assert model_init_kwargs(model, training) == {"revision": "main", "trust_remote_code": False, "dtype": "bfloat16"}
    peft = get_peft_config(model)
    assert peft.r == 16 and "down_proj" in peft.target_modules
    assert training.per_device_train_batch_size * training.gradient_accumulation_steps == training.num_generations
    assert len(load_questions(script, "train")) == script.train_size
    assert len(load_questions(script, "demo")) > 0


def _dry_run(nproc: str) -> list[str]:
    env = {**os.environ, "RAPO_DRY_RUN": "1", "NPROC": nproc, "PYTHON": sys.executable}
    run = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_recipe.sh")], env=env, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    return run.stdout.splitlines()


def test_script_prepares_the_store_then_trains_and_evaluates():
    one = _dry_run("1")
    assert "snapshot_download('Qwen/Qwen2.5-0.5B-Instruct')" in one[0]
    assert one[1:] == [f"rapo {command} --config configs/qwen_gpu.yaml" for command in ("build-store", "train", "eval")]
    several = _dry_run("4")
    assert several[2] == "accelerate launch --num_processes 4 -m rapo_trl.cli train --config configs/qwen_gpu.yaml"
