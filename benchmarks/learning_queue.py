"""The learning protocol's remaining runs (``learning_comparison_notes.md``) as two lanes of one core each, run by
``bench_comparison.py`` in a worktree fixed at the protocol's commit, so that every run of a lane is one code version
whatever main has become; each finished run's record is copied into this checkout's ``learning.json`` and the report
redrawn here, ready to commit.

A sitting's files go with its machine, so the steps rebuild whatever is missing and resume the rest:

    .venv/bin/python benchmarks/learning_queue.py prepare      # worktree, its venv, the store, the warm start and
                                                               # GRPO seed 0's first two steps against its record
    mkdir -p runs
    setsid nohup .venv/bin/python benchmarks/learning_queue.py run 0 >> runs/queue-0.log 2>&1 < /dev/null &
    setsid nohup .venv/bin/python benchmarks/learning_queue.py run 1 >> runs/queue-1.log 2>&1 < /dev/null &
    .venv/bin/python benchmarks/learning_queue.py sync         # copy finished records and redraw, at any time

``prepare`` exits non-zero when the two steps differ from the record: the rebuilt warm start is then not the one the
records started from, and the lanes must not start (the notes say what runs instead). The runs need a CPU that
computes bf16, as every record of the protocol's code did; on another the lanes refuse to start.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_comparison import JSON_PATH, WARM_START_DIR  # noqa: E402
from common import update_results  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PROTOCOL_COMMIT = "839daef6d5de4c97119748fe01142e7bd1f71038"
"""The commit every remaining run of the protocol trains on (code 8d5c3859c977-74aea9eac1b7)."""
PROTOCOL_CODE = "8d5c3859c977-74aea9eac1b7"
WORKTREE = ROOT.parent / "rapo-protocol"
"""The worktree at ``PROTOCOL_COMMIT``, beside this checkout, with a venv of its own (its ``src`` installed)."""
WORKDIR = "runs/comparison"
"""The bench's working folder inside the worktree: store, warm start, runs."""
RESULTS = JSON_PATH.relative_to(ROOT)
"""``learning.json`` inside a checkout: this one's, or the worktree's."""
LISTS = ("comparison", "rescored")
"""The lists of ``learning.json`` a run or a rescore appends to."""
LANES = (
    (("rapo_guided_token", 0), ("rapo_guided_failed", 0), ("rapo_prefix_imitate_failed", 3), ("grpo", 3),
     ("rapo_prefix_imitate_failed", 4), ("grpo", 4), ("rapo_paper", 0)),
    (("sft_then_grpo", 2), ("rapo_guided_token_anneal", 0), ("sft_then_rapo_guided", 0),
     ("sft_then_rapo_guided_token_failed", 3), ("sft_then_grpo", 3), ("sft_then_rapo_guided_token_failed", 4),
     ("sft_then_grpo", 4), ("rapo_paper_scored_blocks", 0)),
)
"""(arm, seed) in the order each lane runs them: stage 1's remaining arms at seed 0 and SFT-then-GRPO seed 2 first,
then stage 3's seeds 3-4 of the two picks (J, E) and their references, then the fidelity pair."""
CHECK_STEPS = 2
"""Steps of the warm-start check. With a linear schedule a run of 2 steps takes its first update at the rate a run
of 30 takes, so its rewards and losses in steps 1-2 are the record's if the start and the code are."""
THREADS = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
"""One torch thread a run, as every record was made (and the warm start with it)."""


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("prepare")
    lane = commands.add_parser("run")
    lane.add_argument("lane", type=int, choices=range(len(LANES)))
    commands.add_parser("sync")
    args = parser.parse_args(argv)
    if args.command == "sync":
        sync()
        return
    refuse_without_bf16()
    if args.command == "prepare":
        prepare()
    else:
        run_lane(LANES[args.lane])


def refuse_without_bf16() -> None:
    from rapo_trl.hardware import cpu_computes_bf16

    if not cpu_computes_bf16():
        raise SystemExit("learning_queue: this CPU does not compute bf16; the protocol's records trained in bf16, "
                         "and fp32 runs here would not pair with them (learning_comparison_notes.md)")


def prepare() -> None:
    if not (WORKTREE / ".git").exists():
        git("worktree", "add", "--detach", str(WORKTREE), PROTOCOL_COMMIT)
    subprocess.run(["bash", "scripts/setup.sh"], cwd=WORKTREE, check=True)
    steps = worktree_python("-c", CHECK_SCRIPT.format(workdir=WORKDIR, steps=CHECK_STEPS), capture=True)
    logged = json.loads(steps.strip().splitlines()[-1])
    record = recorded_run(load_records(ROOT / RESULTS)["comparison"], "grpo", 0, PROTOCOL_CODE)
    differences = check_steps(logged, record, CHECK_STEPS)
    if differences:
        raise SystemExit("learning_queue: the rebuilt warm start is not the records' one:\n" + "\n".join(differences))
    print(f"learning_queue: GRPO seed 0's first {CHECK_STEPS} steps equal its record; the lanes may start")


CHECK_SCRIPT = """
import json, sys
from pathlib import Path
sys.path.insert(0, "benchmarks")
import bench_comparison as bench
from common import store_built_once, train_from_shared_warm_start
workdir = Path("{workdir}")
store = store_built_once(workdir, bench.RECIPE)
output = workdir / "check-grpo-seed0"
train_from_shared_warm_start(output, workdir / bench.WARM_START_DIR, "--config", bench.RECIPE,
                             "--store_path", str(store), *bench.run_flags("grpo", 0, {steps}))
print(json.dumps(bench.step_logs(output / "trainer_state.json")))
"""
"""Run in the worktree: its store, its shared warm start (trained here the first time) and GRPO seed 0 for a few
steps from it, the step logs printed last."""


def recorded_run(records: list[dict], arm: str, seed: int, code: str) -> dict:
    for record in records:
        if record["arm"] == arm and record["seed"] == seed and record.get("code") == code:
            return record
    raise SystemExit(f"learning_queue: no record of {arm} seed {seed} on code {code}")


def check_steps(logged: list[dict], record: dict, steps: int) -> list[str]:
    """What differs between a check run's first ``steps`` step logs and ``record``'s: its reward and loss, exactly."""
    differences = []
    if len(logged) < steps:
        differences.append(f"the check run logged {len(logged)} steps, not {steps}")
    for step, entry in enumerate(logged[:steps]):
        for name in ("reward", "loss"):
            want = record["per_step"][name][step]
            if entry.get(name) != want:
                differences.append(f"step {step + 1} {name}: {entry.get(name)} here, {want} in the record")
    return differences


def run_lane(lane: tuple[tuple[str, int], ...]) -> None:
    if not (WORKTREE / WORKDIR / WARM_START_DIR).exists():
        raise SystemExit("learning_queue: no warm start in the worktree yet; run `learning_queue.py prepare` first "
                         "(two lanes would otherwise build the store and the warm start twice, at once)")
    for arm, seed in lane:
        worktree_python("benchmarks/bench_comparison.py", "--workdir", WORKDIR, "--arms", arm, "--seeds", str(seed))
        sync()


def sync() -> None:
    """Copy the worktree's records that this checkout lacks into its ``learning.json``, then redraw the report."""
    theirs = load_records(WORKTREE / RESULTS)
    added = []
    update_results(ROOT / RESULTS, lambda ours: added.append(merged(ours, theirs)))
    print(f"learning_queue: {added[0]} new records copied")
    subprocess.run([sys.executable, "benchmarks/bench_comparison.py", "--report-only"], cwd=ROOT, check=True)


def load_records(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def merged(ours: dict, theirs: dict) -> int:
    """Append to ``ours`` each record of ``theirs`` (in ``LISTS``) that it does not hold, in ``theirs``' order, and
    return how many; a record is the same one when its arm, seed, code and recording time are."""
    added = 0
    for name in LISTS:
        held = {identity(record) for record in ours.get(name, [])}
        for record in theirs.get(name, []):
            if identity(record) not in held:
                ours.setdefault(name, []).append(record)
                held.add(identity(record))
                added += 1
    return added


def identity(record: dict) -> tuple:
    return record["arm"], record["seed"], record.get("code"), record["recorded"]


def worktree_python(*arguments: str, capture: bool = False) -> str:
    """The worktree's own Python (its ``src`` installed) with ``arguments``, one torch thread; stdout if captured."""
    environment = {**os.environ, **THREADS}
    done = subprocess.run([str(WORKTREE / ".venv/bin/python"), *arguments], cwd=WORKTREE, env=environment, check=True,
                          stdout=subprocess.PIPE if capture else None, text=True)
    return done.stdout or ""


def git(*arguments: str) -> None:
    subprocess.run(["git", *arguments], cwd=ROOT, check=True)


if __name__ == "__main__":
    main()
