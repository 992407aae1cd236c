"""Faults that take too long for the default test run (the fast versions are tests/chaos/).

``soak``: N calls through the real PythonTool, eight at a time as a training step runs them, with a mix of normal,
slow (past the timeout), crashing, memory-hungry and fork-happy programs. Counted before and after: live
descendant processes, open descriptors, entries in a private temp folder, per-call cgroups; per call: seconds past
the timeout. Prints a table and writes ``results/chaos_soak.json`` and ``.md``.

    .venv/bin/python benchmarks/bench_chaos.py soak --calls 1000

``resume``: the tiny-model run of ``tests/helpers/resume_run.py`` (real sandbox, a real Chroma store it grows,
retrieval at p = 0.5; 6 steps, a checkpoint every 2, three questions so steps 4-6 are the second epoch), each in a
process of its own: once uninterrupted, then once per stop point (SIGKILL or SIGTERM in step 3's generation, in its
loss, or in step 4's checkpoint save), resumed with ``resume_from_checkpoint=True``. Per point: the checkpoint
resumed from, whether every step after it equals the uninterrupted run's (questions, per-row rewards, retrieved
records, loss), the store's records (duplicates; the same set as the uninterrupted run's) and the sandbox processes
that outlived the stopped run. Writes ``results/chaos_resume.json`` and ``.md``.

    .venv/bin/python benchmarks/bench_chaos.py resume [--points loss:3:kill,save:4:term]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # tests.helpers.leaks: the same counts as the tests

import common  # noqa: E402

common.use_offline_environment()

PROGRAMS = {
    "normal": ("print(sum(i * i for i in range(10_000)))", True),
    "slow": ("import time\ntime.sleep(60)", False),
    "crashing": ("import ctypes\nctypes.string_at(0)", False),
    "raising": ("raise RuntimeError('model bug')", False),
    "memory_hungry": ("x = bytearray(4 * 2**30)", False),
    "fork_happy": ("import os, time\nfor _ in range(64):\n    try:\n        if os.fork() == 0:\n            time.sleep(60)\n"
                   "    except OSError:\n        break\nprint('forked')", None),
}
# One cycle of the mix: mostly normal calls, as a training step's are, and each fault every cycle.
MIX = ["normal"] * 5 + ["slow", "crashing", "raising", "memory_hungry", "fork_happy"]


def soak(calls: int, timeout: float = 2.0, workers: int = 8) -> dict:
    """Run ``calls`` calls of the mix; what leaked, how late the latest call was, and the throughput."""
    from rapo_trl.tools import PythonTool, run_tool_calls
    from tests.helpers.leaks import Footprint

    tool = PythonTool(timeout=timeout, memory_mb=512, max_processes=8)
    kinds = [MIX[i % len(MIX)] for i in range(calls)]
    with tempfile.TemporaryDirectory(prefix="rapo-soak-") as temp:
        tempfile.tempdir = temp  # a private temp folder: any entry left in it is the sandbox's
        try:
            before = Footprint.now()
            start = time.monotonic()
            results = []
            for first in range(0, calls, workers):
                batch = kinds[first : first + workers]
                results += run_tool_calls([(tool, PROGRAMS[kind][0]) for kind in batch], max_workers=workers)
            seconds = time.monotonic() - start
            after = Footprint.now()
        finally:
            tempfile.tempdir = None
    wrong = [(kind, r.output[:120]) for kind, r in zip(kinds, results)
             if PROGRAMS[kind][1] is not None and r.ok != PROGRAMS[kind][1]]
    per_kind = {kind: {"calls": kinds.count(kind), "ok": sum(r.ok for k, r in zip(kinds, results) if k == kind),
                       "max_seconds": round(max(r.seconds for k, r in zip(kinds, results) if k == kind), 3)}
                for kind in dict.fromkeys(kinds)}
    return {
        "calls": calls, "timeout_s": timeout, "workers": workers, "seconds": round(seconds, 1),
        "calls_per_s": round(calls / seconds, 2),
        "max_seconds_past_timeout": round(max(r.seconds for r in results) - timeout, 3),
        "before": vars(before), "after": vars(after),
        "leaked": {key: getattr(after, key) - getattr(before, key) for key in vars(before)},
        "unexpected_outcomes": wrong[:5], "unexpected_count": len(wrong), "per_kind": per_kind,
    }


def soak_report(result: dict, machine: dict) -> str:
    rows = [(kind, v["calls"], v["ok"], f"{v['max_seconds']:.2f}") for kind, v in result["per_kind"].items()]
    leaked = ", ".join(f"{key} {value:+d}" for key, value in result["leaked"].items())
    return "\n".join([
        "# Sandbox soak", "",
        f"{result['calls']} calls through the real PythonTool (timeout {result['timeout_s']:g} s, "
        f"{result['workers']} at a time), `.venv/bin/python benchmarks/bench_chaos.py soak --calls {result['calls']}`.",
        f"Measured on {common.machine_line(machine)}. It ran beside another long CPU job on this 2-core machine: "
        "the throughput is not a clean timing.", "",
        f"- leaked (after - before): {leaked}",
        f"- latest call past its timeout: {result['max_seconds_past_timeout']:+.2f} s",
        f"- outcomes other than expected: {result['unexpected_count']}",
        f"- throughput: {result['calls_per_s']} calls/s ({result['seconds']} s in all)", "",
        "| program | calls | ok | slowest call (s) |", "|---|---|---|---|",
        *[f"| {kind} | {n} | {ok} | {slowest} |" for kind, n, ok, slowest in rows], "",
    ])


RESUME_POINTS = ("generate:3:kill", "loss:3:kill", "save:4:kill", "generate:3:term", "loss:3:term", "save:4:term")
RESUME_STEPS = 6


def resume(points=RESUME_POINTS, steps: int = RESUME_STEPS) -> dict:
    """Stop the run at each point, resume it, and compare it step by step with the uninterrupted run."""
    from rapo_trl.models import build_tiny_model
    from rapo_trl.trainer.resilience.checkpoint import last_complete_checkpoint
    from tests.helpers.kill_run import stop_run, train_run
    from tests.helpers.resume_run import build_store, per_step, store_records

    rows = []
    with tempfile.TemporaryDirectory(prefix="rapo-resume-") as temp:
        root = Path(temp)
        build_tiny_model(root / "model")
        build_store(root / "store")

        def fresh(name):
            return shutil.copytree(root / "store", root / f"{name}-store")

        start = time.monotonic()
        whole = train_run(root / "model", root / "whole", fresh("whole"), steps)
        if whole.returncode != 0:
            raise RuntimeError(f"the uninterrupted run failed:\n{whole.stderr[-3000:]}")
        whole_seconds = time.monotonic() - start
        reference, whole_ids = per_step(root / "whole"), sorted(store_records(root / "whole-store")[0])
        for point in points:
            phase, step, how = point.split(":")
            name = point.replace(":", "-")
            start = time.monotonic()
            stopped = stop_run(root / "model", root / name, fresh(name), phase, int(step), how, steps)
            checkpoint = last_complete_checkpoint(str(root / name))
            resumed = train_run(root / "model", root / name, root / f"{name}-store", steps, resume=True)
            got = per_step(root / name)
            first = int(checkpoint.rsplit("-", 1)[1]) + 1 if checkpoint else None
            compared = list(range(first, steps + 1)) if first else []
            ids = store_records(root / f"{name}-store")[0]
            rows.append({
                "point": point, "stopped_exit": stopped.returncode, "resumed_exit": resumed.returncode,
                "resumed_from": Path(checkpoint).name if checkpoint else None, "steps_compared": compared,
                "steps_equal": [s for s in compared if got.get(s) == reference[s]],
                "retrievals_compared": sum(bool(r) for s in compared for r in reference[s][2]),
                "records": len(ids), "duplicate_records": len(ids) - len(set(ids)),
                "same_records_as_uninterrupted": sorted(ids) == whole_ids,
                "processes_at_signal": len(stopped.tree), "processes_left": len(stopped.left),
                "seconds": round(time.monotonic() - start, 1),
                "error": None if resumed.returncode == 0 else resumed.stderr[-500:],
            })
    return {"steps": steps, "whole_seconds": round(whole_seconds, 1), "points": rows,
            "exact": all(r["steps_equal"] == r["steps_compared"] != [] for r in rows)}


def resume_report(result: dict, machine: dict) -> str:
    rows = [f"| {r['point']} | {r['stopped_exit']} | {r['resumed_from']} | {len(r['steps_equal'])}/"
            f"{len(r['steps_compared'])} ({r['retrievals_compared']} retrievals) | {r['duplicate_records']} | "
            f"{'yes' if r['same_records_as_uninterrupted'] else 'no'} | {r['processes_at_signal']} -> "
            f"{r['processes_left']} |" for r in result["points"]]
    return "\n".join([
        "# Stopped mid-step, then resumed", "",
        f"The {result['steps']}-step tiny-model run of `tests/helpers/resume_run.py`, each run in a process of its own, "
        "`.venv/bin/python benchmarks/bench_chaos.py resume`. "
        f"Measured on {common.machine_line(machine)}.", "",
        f"Every resumed run equal to the uninterrupted one at every step after its checkpoint: "
        f"{'yes' if result['exact'] else 'NO'}.", "",
        "| stop point (phase:step:signal) | exit | resumed from | steps equal | duplicate records | same records |"
        " sandbox processes at the signal -> left |",
        "|---|---|---|---|---|---|---|", *rows, "",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="scenario", required=True)
    soak_parser = sub.add_parser("soak", help="N sandbox calls of a mix of programs; leaks and lateness")
    soak_parser.add_argument("--calls", type=int, default=1000)
    soak_parser.add_argument("--timeout", type=float, default=2.0)
    soak_parser.add_argument("--no-write", action="store_true", help="print only")
    resume_parser = sub.add_parser("resume", help="a run stopped mid-step, resumed, compared with the uninterrupted")
    resume_parser.add_argument("--points", default=",".join(RESUME_POINTS), help="phase:step:signal,...")
    resume_parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    machine = common.machine_info()
    if args.scenario == "soak":
        result, name = soak(args.calls, args.timeout), "chaos_soak"
        report = soak_report(result, machine)
    else:
        result, name = resume(args.points.split(",")), "chaos_resume"
        report = resume_report(result, machine)
    print(report)
    if not args.no_write:
        (common.RESULTS / f"{name}.json").write_text(json.dumps({"machine": machine, **result}, indent=1) + "\n")
        (common.RESULTS / f"{name}.md").write_text(report)


if __name__ == "__main__":
    main()
