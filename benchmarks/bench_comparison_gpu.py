"""The learning comparison's arms on one GPU, side by side, within a lease: ``configs/comparison_gpu.yaml`` (the CPU
comparison's recipe at 256 rollouts a step) for GRPO and a retrieval arm from one warm start and one seed.

A GPU lease is short (the device tool: ~15 minutes in all, 10 a call), so one process runs the whole comparison with a
deadline:

1. ``rapo build-store`` (RL's questions, the warm start's collection beside them);
2. the first arm's ``rapo train``, which makes the shared SFT warm start; as soon as that warm start is whole
   (its key file is written last), the other arms start from a copy of it, and the warm start is scored beside them;
3. at ``--deadline`` seconds after this process started, a run still training gets SIGTERM: it finishes its step,
   saves a whole checkpoint and stops (``rapo train --resume_from_checkpoint`` continues it in a later lease);
4. every arm's model (the finished one, else its newest checkpoint) is scored by ``rapo eval`` as
   ``bench_comparison.py`` scores it: mean@4 and greedy on fresh questions of RL's stories, greedy on held-out stories.

Each run becomes a ``comparison`` record of ``benchmarks/results/learning.json`` (the recipe and machine name the GPU;
``steps`` is the steps it trained), appended at once, and a copy of the new records is written to ``--records``; back
on the development machine ``--import-records`` appends that copy to the committed results.

    python benchmarks/bench_comparison_gpu.py --arms grpo rapo_guided_token --deadline 470 --records /tmp/records.json
    python benchmarks/bench_comparison_gpu.py --import-records records.json
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_comparison as comparison  # noqa: E402
from common import rapo_command, store_built_once, use_offline_environment  # noqa: E402

use_offline_environment()

RECIPE = "configs/comparison_gpu.yaml"
ROOT = Path(__file__).resolve().parent.parent


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.import_records:
        for record in json.loads(Path(args.import_records).read_text()):
            comparison.append(record)
        comparison.write_report()
        return
    started = time.monotonic()
    eval_flags = shlex.split(args.eval_flags)
    workdir = Path(args.workdir)
    store = store_built_once(workdir, RECIPE)
    version = code_version()
    shared = workdir / comparison.WARM_START_DIR
    runs = {}
    for index, arm in enumerate(args.arms):
        if index == 1 and not shared.exists():
            wait_for_warm_start(runs[args.arms[0]], shared)
        runs[arm] = start_training(arm, args.seed, workdir, store, shared, args.steps, shlex.split(args.train_flags))
    warm_eval = None
    if args.eval_warm_start:
        wait_for_warm_start(runs[args.arms[0]], shared)
        warm_eval = eval_in_background(shared, store, eval_flags)
    stop_at_deadline(runs, started + args.deadline)
    scoring = {arm: (run, eval_in_background(scored_model(run), store, eval_flags)) for arm, run in runs.items()}
    new_records = []

    def keep(record: dict) -> None:
        """Recorded at once, and the --records copy rewritten: a lease that ends mid-way keeps what finished."""
        new_records.append(record)
        comparison.append(record)
        if args.records:
            Path(args.records).write_text(json.dumps(new_records, indent=1))

    if warm_eval is not None:  # started first, so it ends first
        keep(warm_start_record(warm_eval, version))
    for arm, (run, evaluation) in scoring.items():
        record = finish_record(arm, args.seed, run, evaluation, version)
        keep(record)
        print(f"comparison (GPU): {arm} seed {args.seed}: {record['steps']} steps, fresh mean@4 "
              f"{comparison.fresh_mean(record):.3f}", flush=True)
    comparison.write_report()


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default="runs/comparison-gpu")
    parser.add_argument("--arms", nargs="+", default=["grpo", "rapo_guided_token"], choices=list(comparison.ARMS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--deadline", type=float, default=470.0,
                        help="seconds after start at which runs still training are stopped (SIGTERM) and scored")
    parser.add_argument("--eval-warm-start", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--records", default=None, help="also write this run's records to this JSON file")
    parser.add_argument("--import-records", default=None,
                        help="append the records a GPU run wrote (its --records file) to learning.json, and stop")
    parser.add_argument("--train-flags", default="", help="flags added to every `rapo train` (a dry run's smaller sizes)")
    parser.add_argument("--eval-flags", default="", help="flags added to every `rapo eval`")
    return parser.parse_args(argv)


def code_version() -> dict:
    """``bench_comparison``'s version of the runs; on a machine that has the working tree without its git folder (the
    GPU machine), from ``RAPO_COMMIT`` and ``RAPO_CODE_VERSION``, computed where the git folder is."""
    if os.environ.get("RAPO_CODE_VERSION"):
        return {"commit": os.environ.get("RAPO_COMMIT", "unknown"), "code": os.environ["RAPO_CODE_VERSION"]}
    return {"commit": comparison.git("rev-parse", "HEAD"), "code": comparison.code_version(RECIPE)}


class Run:
    """One arm's ``rapo train`` in the background, with its output folder and log."""

    def __init__(self, arm: str, output: Path, flags: list[str], process: subprocess.Popen, log):
        self.arm, self.output, self.flags, self.process, self.log = arm, output, flags, process, log
        self.started = time.monotonic()
        self.seconds: float | None = None
        self.stopped = False

    def wait(self) -> int:
        code = self.process.wait()
        if self.seconds is None:
            self.seconds = time.monotonic() - self.started
        self.log.close()
        return code


def start_training(arm: str, seed: int, workdir: Path, store: Path, shared: Path, steps: int,
                   extra: list[str]) -> Run:
    output = workdir / f"{arm}-seed{seed}"
    if output.exists():
        shutil.rmtree(output)
    output.mkdir(parents=True)
    if shared.exists():
        shutil.copytree(shared, output / shared.name)
    flags = ["--seed", str(seed), "--sft_seed", str(comparison.SFT_SEED), "--max_steps", str(steps),
             "--sft_same_time", "false", *comparison.ARMS[arm]]
    log = open(workdir / f"{arm}-seed{seed}.log", "w")
    command = rapo_command("train", "--config", RECIPE, "--output_dir", str(output), "--store_path", str(store), *flags,
                           *extra)
    print("+", " ".join(command), flush=True)
    process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    return Run(arm, output, flags, process, log)


def wait_for_warm_start(first: Run, shared: Path) -> None:
    """Copy the first run's warm start to ``shared`` once it is whole (its key file is written last)."""
    made = first.output / comparison.WARM_START_DIR
    while not (made / "warm_start_key.json").exists():
        if first.process.poll() is not None:
            raise SystemExit(f"{first.arm} ended (exit {first.process.returncode}) before its warm start was whole; "
                             f"see {first.log.name}")
        time.sleep(2)
    if not shared.exists():
        shutil.copytree(made, shared)


def stop_at_deadline(runs: dict[str, Run], deadline: float) -> None:
    while any(run.process.poll() is None for run in runs.values()) and time.monotonic() < deadline:
        time.sleep(2)
    for run in runs.values():
        if run.process.poll() is None:
            run.stopped = True
            print(f"comparison (GPU): deadline: stopping {run.arm} after its current step", flush=True)
            run.process.send_signal(signal.SIGTERM)
    for run in runs.values():
        run.wait()


def scored_model(run: Run) -> Path:
    """The trained model when the run finished, else its newest checkpoint (what a stop on SIGTERM saved)."""
    warm_start = run.output / comparison.WARM_START_DIR
    if warm_start.exists():
        shutil.rmtree(warm_start)  # eval scores the trained model alone
    if (run.output / "adapter_config.json").exists():
        return run.output
    checkpoints = sorted(run.output.glob("checkpoint-*"), key=lambda p: int(p.name.removeprefix("checkpoint-")))
    if not checkpoints:
        raise SystemExit(f"{run.arm} saved no model and no checkpoint; see {run.log.name}")
    return checkpoints[-1]


def eval_in_background(model: Path, store: Path, extra: list[str]) -> tuple[Path, subprocess.Popen, float]:
    """``bench_comparison.evaluate``'s ``rapo eval``, started in the background."""
    command = rapo_command(*comparison.eval_arguments(model, store, RECIPE), *extra)
    log = open(model.parent / f"{model.name}-eval.log", "w")
    print("+", " ".join(command), flush=True)
    return model, subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT), time.monotonic()


def scores_of(evaluation: tuple[Path, subprocess.Popen, float]) -> tuple[dict, float]:
    model, process, started = evaluation
    if process.wait() != 0:
        raise SystemExit(f"rapo eval of {model} failed (exit {process.returncode}); see its -eval.log")
    return comparison.read_scores(model / "eval_results.json"), time.monotonic() - started


def finish_record(arm: str, seed: int, run: Run, evaluation, version: dict) -> dict:
    scores, eval_seconds = scores_of(evaluation)
    state = run.output / "trainer_state.json"
    if not state.exists():  # stopped at the deadline: the checkpoint that was scored holds the state
        state = evaluation[0] / "trainer_state.json"
    logs = comparison.step_logs(state)
    return comparison.make_record(arm, seed, run.flags, RECIPE, version, len(logs), logs, scores, eval_seconds,
                                  stopped_at_deadline=run.stopped, train_seconds=round(run.seconds, 1))


def warm_start_record(evaluation, version: dict) -> dict:
    scores, seconds = scores_of(evaluation)
    return comparison.warm_start_record(RECIPE, version, scores, seconds)


if __name__ == "__main__":
    main()
