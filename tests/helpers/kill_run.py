"""Start ``tests.helpers.resume_run`` in its own process, wait until it holds at the named point of a step (its
marker file), signal it there, and say which of its processes outlived it. Shared by tests/chaos and
benchmarks/bench_chaos.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.leaks import alive, descendants
from tests.helpers.resume_run import MARKER_ENV, STOP_ENV

REPO = Path(__file__).resolve().parents[2]
SIGNALS = {"kill": signal.SIGKILL, "term": signal.SIGTERM}


@dataclass
class Stopped:
    returncode: int
    tree: list[int]
    """The run's descendant processes when the signal was sent (the sandbox's, at ``generate``)."""
    left: list[int]
    """Those still alive once the run had ended."""
    stderr: str


def _env(stop: str, marker: Path | None) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
               HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO), env.get("PYTHONPATH", "")])
    env.pop(STOP_ENV, None)
    env.pop(MARKER_ENV, None)
    if stop:
        env[STOP_ENV], env[MARKER_ENV] = stop, str(marker)
    return env


def _argv(model_dir, run_dir, store_dir, max_steps: int | None, resume: bool = False) -> list[str]:
    argv = [sys.executable, "-m", "tests.helpers.resume_run", str(model_dir), str(run_dir), str(store_dir)]
    return argv + (["--max_steps", str(max_steps)] if max_steps else []) + (["--resume"] if resume else [])


def train_run(model_dir, run_dir, store_dir, max_steps: int | None = None, resume: bool = False,
              timeout: float = 600) -> subprocess.CompletedProcess:
    """The run to its end in a process of its own (``resume``: from its newest whole checkpoint)."""
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    return subprocess.run(_argv(model_dir, run_dir, store_dir, max_steps, resume), cwd=REPO, env=_env("", None),
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=timeout)


def stop_run(model_dir, run_dir, store_dir, phase: str, step: int, how: str, max_steps: int | None = None,
             timeout: float = 300) -> Stopped:
    """Run until step ``step`` reaches ``phase``, send ``how`` (``kill``: SIGKILL, ``term``: SIGTERM) and wait for
    the process to end."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    marker = run_dir / "held"
    with open(run_dir / "stderr.txt", "w") as err:
        process = subprocess.Popen(_argv(model_dir, run_dir, store_dir, max_steps), cwd=REPO,
                                   env=_env(f"{phase}:{step}:{how}", marker), stdout=subprocess.DEVNULL, stderr=err)
        try:
            deadline = time.monotonic() + timeout
            while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if not marker.exists():
                raise RuntimeError(f"the run never reached {phase} of step {step} (exit {process.poll()}): "
                                   + (run_dir / "stderr.txt").read_text()[-3000:])
            # At generate, the held call starts a sandbox process: the kill must find it running.
            while phase == "generate" and how == "kill" and not descendants(process.pid) \
                    and time.monotonic() < deadline:
                time.sleep(0.05)
            tree = descendants(process.pid)
            process.send_signal(SIGNALS[how])
            process.wait(timeout=timeout)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    deadline = time.monotonic() + 10  # the sandbox's processes die with their caller (PR_SET_PDEATHSIG)
    while any(alive(pid) for pid in tree) and time.monotonic() < deadline:
        time.sleep(0.05)
    return Stopped(process.returncode, tree, [pid for pid in tree if alive(pid)],
                   (run_dir / "stderr.txt").read_text())
