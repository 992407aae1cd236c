"""The learning protocol's remaining runs (``learning_comparison_notes.md``) as two lanes of one core each, run by
``bench_comparison.py`` in a worktree fixed at one commit, so that every run of a line is one code version whatever
main has become; each finished run's record is copied into this checkout's ``learning.json`` and the report redrawn
here, ready to commit.

A line is one code version and one arithmetic (runs pair only within one): ``bf16`` is the protocol begun on CPUs
that compute bf16 (839daef), ``fp32`` the same protocol's finalists and references from the start on CPUs that do
not (AVX2 only), where the precision rule trains in fp32. Each line runs only on its own kind of CPU.

A sitting's files go with its machine, so the steps rebuild whatever is missing and resume the rest:

    .venv/bin/python benchmarks/learning_queue.py prepare      # the line of this CPU: worktree, its venv, the store,
                                                               # the warm start and GRPO seed 0's first two steps
                                                               # against its record (once there is one)
    mkdir -p runs
    setsid nohup .venv/bin/python benchmarks/learning_queue.py run 0 >> runs/queue-0.log 2>&1 < /dev/null &
    setsid nohup .venv/bin/python benchmarks/learning_queue.py run 1 >> runs/queue-1.log 2>&1 < /dev/null &
    .venv/bin/python benchmarks/learning_queue.py sync         # copy finished records of every line and redraw

A line that is not the protocol's (the fidelity arm's, on later code) is named: ``prepare --line bf16-fidelity``,
then ``run 0 --line bf16-fidelity``; it checks its rebuilt warm start against the record its ``check`` names.

When the two steps differ from the record, the rebuilt warm start is not the one the records started from (another
CPU's kernels sum in another order): ``prepare`` says so and writes the warm start's fingerprint beside it, and the
lanes run the line's ``rebuilt_lanes``, whole pairs of a pick and its reference, all from this warm start, whose
records ``sync`` marks with the fingerprint so that the goals pair runs of one warm start only (the notes' rule for a
rebuilt warm start). A warm start already in the worktree (an earlier sitting's on the same machine) is taken as its
fingerprint file says; one that was never checked is checked first, not built again.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_comparison import JSON_PATH, WARM_START_DIR  # noqa: E402
from common import update_results  # noqa: E402
from learning_goals import FIXED_PICKS  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
WORKDIR = "runs/comparison"
"""The bench's working folder inside a line's worktree: store, warm start, runs."""
RESULTS = JSON_PATH.relative_to(ROOT)
"""``learning.json`` inside a checkout: this one's, or a worktree's."""
WARM_START_FILE = "warm-start.json"
"""Beside the warm start in the worktree's working folder: its fingerprint, whether it is the one the line's records
started from, and when ``prepare`` found that out."""
LISTS = ("comparison", "rescored")
"""The lists of ``learning.json`` a run or a rescore appends to."""
FP32_COMMIT = "5e8abc58dc8cf3a71f9809e0b68ab50e6044bb95"
J, E = FIXED_PICKS[FP32_COMMIT]
"""The two picks of the ``bf16`` line's stage 2, the best warm-start arm and the best SFT arm: the ``fp32`` line's
arms, fixed before its runs."""
FIDELITY_COMMIT = "2394c0e9d8fd435ad90932a640df564461129505"
"""A commit whose ``score_retrieved_blocks`` reaches RAPO's outcome reward, with the fixes found beside it."""


@dataclass(frozen=True)
class Check:
    """The run whose first ``CHECK_STEPS`` steps, trained in a line's worktree from its warm start, show whether that
    warm start and the line's code repeat a record exactly."""

    arm: str
    seed: int
    code: str | None = None
    """The code version of the record compared against; ``None``: the line's own (its worktree's)."""
    warm_start: str | None = None
    """The fingerprint of the warm start the record was made from; ``None``: the line's records' own warm start,
    whose records carry none."""


@dataclass(frozen=True)
class Line:
    """One code version and one arithmetic: every run of a line trains at ``commit`` in the precision the CPU's
    rule picks, so its runs pair."""

    name: str
    """The line's name, and its worktree's: ``rapo-protocol-<name>`` beside this checkout."""
    arithmetic: str
    """``"bf16"`` or ``"fp32"``: the precision rule's choice on the CPUs the line runs on (``default_precision``)."""
    commit: str
    """The commit every run of the line trains on."""
    lanes: tuple[tuple[tuple[str, int], ...], ...]
    """(arm, seed) in the order each lane runs them from the warm start the line's records started from; the arm
    ``warm_start`` scores the shared warm start."""
    rebuilt_lanes: tuple[tuple[tuple[str, int], ...], ...]
    """The same from a warm start rebuilt unlike the records' one: whole pairs only (a pick and its reference at one
    seed, one after the other in one lane), the seeds the goals still need first."""
    rebuilt_screening: tuple[tuple[tuple[str, int], ...], ...]
    """What each lane runs from a rebuilt warm start after its ``rebuilt_lanes``: stage 1's arms the line has not run
    (seed 0), each after its seed-0 reference from the same warm start in the same lane, and the warm start scored."""
    warm_start_threads: int
    """Torch threads the store and the warm start are built on, before any lane runs (the same at every rebuild, so
    that a rebuilt warm start is the records' one)."""
    check: Check = Check("grpo", 0)
    """The record a rebuilt warm start is checked against before the lanes run."""

    @property
    def names_its_warm_start(self) -> bool:
        """Whether each run of the line is recorded with its warm start's fingerprint, even when the check passed:
        yes when the check's record names a warm start, so that the line's runs pair with that warm start's runs and
        not with the unmarked ones."""
        return self.check.warm_start is not None

    @property
    def worktree(self) -> Path:
        """The worktree at ``commit``, beside this checkout, with a venv of its own (its ``src`` installed)."""
        return ROOT.parent / f"rapo-protocol-{self.name}"

    @property
    def warm_start(self) -> Path:
        """The shared warm start every run of the worktree starts from."""
        return self.worktree / WORKDIR / WARM_START_DIR

    @property
    def warm_start_file(self) -> Path:
        """``WARM_START_FILE`` beside the warm start."""
        return self.worktree / WORKDIR / WARM_START_FILE


LINES = {line.name: line for line in (
    Line("bf16", "bf16", "839daef6d5de4c97119748fe01142e7bd1f71038", (
        (("rapo_guided_token", 0), ("rapo_guided_failed", 0), (J, 3), ("grpo", 3), (J, 4), ("grpo", 4),
         ("rapo_paper", 0)),
        (("sft_then_grpo", 2), ("rapo_guided_token_anneal", 0), ("sft_then_rapo_guided", 0), (E, 3),
         ("sft_then_grpo", 3), (E, 4), ("sft_then_grpo", 4), ("rapo_paper_scored_blocks", 0)),
    ), rebuilt_lanes=(
        ((J, 3), ("grpo", 3), (J, 4), ("grpo", 4), (E, 2), ("sft_then_grpo", 2)),
        ((E, 3), ("sft_then_grpo", 3), (E, 4), ("sft_then_grpo", 4)),
    ), rebuilt_screening=(
        (("warm_start", 0), ("rapo_guided", 0), ("rapo_guided_token", 0), ("rapo_guided_failed", 0),
         ("rapo_guided_token_anneal", 0)),
        (("rapo_paper", 0), ("rapo_paper_scored_blocks", 0), ("sft_then_grpo", 0), ("sft_then_rapo_guided", 0)),
    ), warm_start_threads=1),
    Line("fp32", "fp32", FP32_COMMIT, (
        (("grpo", 0), (J, 0), ("warm_start", 0), *((arm, seed) for seed in range(1, 5) for arm in ("grpo", J))),
        tuple((arm, seed) for seed in range(5) for arm in ("sft_then_grpo", E)),
    ), rebuilt_lanes=(
        tuple((arm, seed) for seed in range(1, 5) for arm in ("grpo", J)),
        tuple((arm, seed) for seed in (*range(1, 5), 0) for arm in ("sft_then_grpo", E)),
    ), rebuilt_screening=((), ()), warm_start_threads=2),
    Line("bf16-fidelity", "bf16", FIDELITY_COMMIT, (
        (("rapo_paper_scored_blocks", 0),), (),
    ), rebuilt_lanes=(
        (("rapo_paper", 0), ("rapo_paper_scored_blocks", 0)), (),
    ), rebuilt_screening=((), ()), warm_start_threads=1,
        check=Check("rapo_paper", 0, code="8d5c3859c977-74aea9eac1b7", warm_start="182abf71d7cd")),
)}
"""``bf16``: stage 1's remaining arms at seed 0 and SFT-then-GRPO seed 2 first, then stage 3's seeds 3-4 of the two
picks (J, E) and their references, then the fidelity pair; from a rebuilt warm start, the goals' pairs, then stage
1's remaining arms with their seed-0 references and the fidelity pair. ``fp32``: the picks and their references over
seeds 0-4, each seed's pair together, the warm start scored once after the first pair (the arms chosen before any
run of the line, from the ``bf16`` line's records; ``learning_comparison_notes.md``). ``bf16-fidelity``: the
fidelity arm (retrieved blocks scored, which the ``bf16`` line's code ignored) on code that honours it, checked
against ``rapo_paper`` seed 0 of the ``bf16`` line from the Zen 4 warm start: if its first steps repeat, the arm
pairs with that run, else ``rapo_paper`` seed 0 runs again beside it."""
CHECK_STEPS = 2
"""Steps of the warm-start check. With a linear schedule a run of 2 steps takes its first update at the rate a run
of 30 takes, so its rewards and losses in steps 1-2 are the record's if the start and the code are."""
RUN_THREADS = 1
"""One torch thread a run, as every record was made."""


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    prepare_command = commands.add_parser("prepare")
    lane = commands.add_parser("run")
    lane.add_argument("lane", type=int, choices=range(2))
    for command in (prepare_command, lane):
        command.add_argument("--line", choices=sorted(LINES), default=None,
                             help="another line of this CPU's arithmetic (default: the protocol's line, named by it)")
    commands.add_parser("sync")
    args = parser.parse_args(argv)
    if args.command == "sync":
        sync()
        return
    line = line_of_this_cpu(args.line)
    if args.command == "prepare":
        prepare(line)
    else:
        run_lane(line, args.lane)


def line_of_this_cpu(name: str | None = None) -> Line:
    """The line ``name`` (by default the one named by its arithmetic) if the precision rule picks its arithmetic on
    this CPU: its runs pair with that line's records only then."""
    from rapo_trl.hardware import default_precision

    precision = default_precision("cpu")
    name = precision if name is None else name
    if name not in LINES:
        raise SystemExit(f"learning_queue: this CPU trains in {precision}, the arithmetic of no line")
    line = LINES[name]
    if line.arithmetic != precision:
        raise SystemExit(f"learning_queue: the {line.name} line trains in {line.arithmetic}, this CPU in {precision}")
    print(f"learning_queue: this CPU trains in {precision}: the {line.name} line, at {line.commit[:10]}", flush=True)
    return line


def prepare(line: Line) -> None:
    if not (line.worktree / ".git").exists():
        git("worktree", "add", "--detach", str(line.worktree), line.commit)
    subprocess.run(["bash", "scripts/setup.sh"], cwd=line.worktree, check=True)
    if line.warm_start.exists() and line.warm_start_file.exists():
        # made and checked by an earlier prepare, in this worktree and venv
        print(f"learning_queue: the worktree's warm start is in place ({describe(warm_start_state(line))}); the "
              "lanes may start")
        return
    code = worktree_python(line, "-c", CODE_SCRIPT, capture=True).strip()
    check = line.check
    record = recorded_run(load_records(ROOT / RESULTS).get("comparison", []), check.arm, check.seed,
                          check.code or code, check.warm_start)
    logged = None if line.warm_start.exists() else check_run(line, line.warm_start_threads)  # builds the warm start
    if record is None:
        print(f"learning_queue: no record of {check.arm} seed {check.seed} on code {check.code or code} yet: its "
              "first run makes the one later warm starts are checked against; the lanes may start")
        write_warm_start_state(line, records_one=True)
        return
    if logged is None or line.warm_start_threads != 1:
        logged = check_run(line, 1)  # as the records ran: one thread
    differences = check_steps(logged, record, CHECK_STEPS)
    state = write_warm_start_state(line, records_one=not differences)
    if differences:
        print("learning_queue: the rebuilt warm start is not the records' one:\n" + "\n".join(differences))
    print(f"learning_queue: {describe(state)}; the lanes may start")


def check_run(line: Line, threads: int) -> list[dict]:
    """The first ``CHECK_STEPS`` step logs of the line's check run in its worktree, on ``threads`` torch threads;
    the store and the warm start are built first where they are missing."""
    script = CHECK_SCRIPT.format(workdir=WORKDIR, steps=CHECK_STEPS, arm=line.check.arm, seed=line.check.seed)
    steps = worktree_python(line, "-c", script, capture=True, threads=threads)
    return json.loads(steps.strip().splitlines()[-1])


CODE_SCRIPT = """
import sys
sys.path.insert(0, "benchmarks")
import bench_comparison
print(bench_comparison.code_version())
"""
"""Run in a worktree: the code version its runs are recorded under."""
CHECK_SCRIPT = """
import json, sys
from pathlib import Path
sys.path.insert(0, "benchmarks")
import bench_comparison as bench
from common import store_built_once, train_from_shared_warm_start
workdir = Path("{workdir}")
store = store_built_once(workdir, bench.RECIPE)
output = workdir / "check-{arm}-seed{seed}"
train_from_shared_warm_start(output, workdir / bench.WARM_START_DIR, "--config", bench.RECIPE,
                             "--store_path", str(store), *bench.run_flags("{arm}", {seed}, {steps}))
print(json.dumps(bench.step_logs(output / "trainer_state.json")))
"""
"""Run in the worktree: its store, its shared warm start (trained here the first time) and the line's check run for
a few steps from it, the step logs printed last."""


def recorded_run(records: list[dict], arm: str, seed: int, code: str, warm_start: str | None = None) -> dict | None:
    """The first record of ``arm`` and ``seed`` on ``code`` from the warm start of fingerprint ``warm_start``
    (``None``: from the one the records carry no fingerprint of)."""
    for record in records:
        if (record["arm"] == arm and record["seed"] == seed and record.get("code") == code
                and record.get("warm_start") == warm_start):
            return record
    return None


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


def run_lane(line: Line, lane: int) -> None:
    """Lane ``lane`` of the line's plan for the worktree's warm start: ``lanes`` from the records' one, else
    ``rebuilt_lanes`` then ``rebuilt_screening``, less the runs this checkout already holds from the same warm start
    and code (made on an earlier machine whose rebuild gave the same weights)."""
    if not line.warm_start.exists():
        raise SystemExit("learning_queue: no warm start in the worktree yet; run `learning_queue.py prepare` first "
                         "(two lanes would otherwise build the store and the warm start twice, at once)")
    state = warm_start_state(line)
    runs = line.lanes[lane] if state["records_one"] else line.rebuilt_lanes[lane] + line.rebuilt_screening[lane]
    print(f"learning_queue: lane {lane} from {describe(state)}", flush=True)
    code = worktree_python(line, "-c", CODE_SCRIPT, capture=True).strip()
    for arm, seed in runs:
        if not state["records_one"] and held_here(load_records(ROOT / RESULTS), arm, seed, code, state["fingerprint"]):
            print(f"learning_queue: {arm} seed {seed} from this warm start is recorded; skipped", flush=True)
            continue
        arms = ["--eval-warm-start"] if arm == "warm_start" else [arm, "--seeds", str(seed)]
        worktree_python(line, "benchmarks/bench_comparison.py", "--workdir", WORKDIR, "--arms", *arms)
        sync()


def held_here(records: dict, arm: str, seed: int, code: str, fingerprint: str) -> bool:
    return any(r["arm"] == arm and r["seed"] == seed and r.get("code") == code and r.get("warm_start") == fingerprint
               for r in records.get("comparison", []))


def fingerprint_of(warm_start: Path) -> str:
    """The first 12 hex digits of the SHA-256 of the warm start's weight files, in name order: two builds with the
    same weights have the same fingerprint, on any machine."""
    digest = hashlib.sha256()
    for path in sorted(warm_start.rglob("*.safetensors")):
        digest.update(path.relative_to(warm_start).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def write_warm_start_state(line: Line, records_one: bool) -> dict:
    state = {"fingerprint": fingerprint_of(line.warm_start), "records_one": records_one,
             "checked": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    line.warm_start_file.write_text(json.dumps(state, indent=1) + "\n")
    return state


def warm_start_state(line: Line) -> dict:
    """The worktree's warm start as ``prepare`` found it."""
    state = state_if_any(line)
    if state is None:
        raise SystemExit("learning_queue: the worktree's warm start has not been checked against the records; run "
                         "`learning_queue.py prepare` first")
    return state


def describe(state: dict) -> str:
    if state["records_one"]:
        return f"the warm start the line's records started from ({state['fingerprint']})"
    return f"a warm start rebuilt unlike the records' one ({state['fingerprint']}): whole pairs from it"


def marked(records: dict, state: dict, line: Line) -> dict:
    """``records`` with each run made from a rebuilt warm start (recorded after ``prepare`` checked it) carrying its
    fingerprint; records of the records' own warm start are left as they were, unless the line names its warm
    start."""
    if state is None or (state["records_one"] and not line.names_its_warm_start):
        return records

    def mark(record: dict) -> dict:
        made_from_it = "warm_start" not in record and record.get("recorded", "") >= state["checked"]
        return {**record, "warm_start": state["fingerprint"]} if made_from_it else record

    return {**records, **{name: [mark(r) for r in records[name]] for name in LISTS if name in records}}


def sync() -> None:
    """Copy every line's records that this checkout lacks into its ``learning.json``, then redraw the report."""
    theirs = [marked(load_records(line.worktree / RESULTS), state_if_any(line), line) for line in LINES.values()]
    added = []
    update_results(ROOT / RESULTS, lambda ours: added.append(sum(merged(ours, records) for records in theirs)))
    print(f"learning_queue: {added[0]} new records copied")
    subprocess.run([sys.executable, "benchmarks/bench_comparison.py", "--report-only"], cwd=ROOT, check=True)


def state_if_any(line: Line) -> dict | None:
    return json.loads(line.warm_start_file.read_text()) if line.warm_start_file.exists() else None


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


def worktree_python(line: Line, *arguments: str, capture: bool = False, threads: int = RUN_THREADS) -> str:
    """The line's worktree's own Python (its ``src`` installed) with ``arguments`` on ``threads`` torch threads;
    stdout if captured."""
    environment = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    done = subprocess.run([str(line.worktree / ".venv/bin/python"), *arguments], cwd=line.worktree, env=environment,
                          check=True, stdout=subprocess.PIPE if capture else None, text=True)
    return done.stdout or ""


def git(*arguments: str) -> None:
    subprocess.run(["git", *arguments], cwd=ROOT, check=True)


if __name__ == "__main__":
    main()
