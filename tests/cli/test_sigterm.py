"""SIGTERM to a real ``rapo train`` (a scheduler preempting the job): the step finishes, its checkpoint is saved
whole, the command exits 143 with one line naming the checkpoint, and the same command resumes from it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from rapo_trl.saved_checkpoints import RUN_RECORD, saved_run_id
from tests.cli.conftest import recipe, write_yaml

REPO = Path(__file__).resolve().parents[2]


def _rapo(*args: str) -> list[str]:
    return [sys.executable, "-m", "rapo_trl.cli", *args]


def _env() -> dict[str, str]:
    return dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]))


def test_sigterm_stops_rapo_train_after_a_whole_checkpoint_and_the_command_resumes(tiny_model_dir, tmp_path):
    output = tmp_path / "run"
    config = write_yaml(tmp_path / "recipe.yaml", {
        **recipe(tiny_model_dir, tmp_path), "output_dir": str(output), "retrieve_prob": 0.0, "max_steps": 200,
        "save_strategy": "steps", "save_steps": 1})
    process = subprocess.Popen(_rapo("train", "--config", str(config)), cwd=tmp_path, env=_env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not (output / "checkpoint-1" / "trainer_state.json").is_file():
            assert process.poll() is None and time.monotonic() < deadline, "no first checkpoint"
            time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=300)
    finally:
        process.kill()
    assert process.returncode == 128 + signal.SIGTERM, stderr
    last = [line for line in stderr.splitlines() if line.strip()][-1]
    stopped = re.fullmatch(r"rapo train: stopped: RAPO stopped on SIGTERM after step (\d+)\. The checkpoint (\S+) "
                           r"is whole: to continue exactly from there, run the same command again with "
                           r"`--resume_from_checkpoint (\S+)` \(or the bare flag: the newest whole checkpoint\).*", last)
    assert stopped, last
    step, checkpoint = int(stopped.group(1)), Path(stopped.group(2))
    assert checkpoint == output / f"checkpoint-{step}" == Path(stopped.group(3)) and step < 200
    assert json.loads((checkpoint / "trainer_state.json").read_text())["global_step"] == step
    assert max(int(p.name.split("-")[1]) for p in output.glob("checkpoint-*")) == step  # nothing after it
    run_id = json.loads((output / RUN_RECORD).read_text())["run_id"]
    assert saved_run_id(str(checkpoint)) == run_id  # whose checkpoint it is, should another run start over here

    # the advice as written, in its bare-flag form: the newest whole checkpoint, the one named
    resumed = subprocess.run(_rapo("train", "--config", str(config), "--max_steps", str(step + 1),
                                   "--resume_from_checkpoint"),
                             cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((output / f"checkpoint-{step + 1}" / "trainer_state.json").read_text())["global_step"] == step + 1
    # the same run continued: its record and its new checkpoint keep its id
    assert json.loads((output / RUN_RECORD).read_text())["run_id"] == run_id
    assert saved_run_id(str(output / f"checkpoint-{step + 1}")) == run_id
