"""Faults that take too long for the default test run (the fast versions are tests/chaos/).

``soak``: N calls through the real PythonTool, eight at a time as a training step runs them, with a mix of normal,
slow (past the timeout), crashing, memory-hungry and fork-happy programs. Counted before and after: live
descendant processes, open descriptors, entries in a private temp folder, per-call cgroups; per call: seconds past
the timeout. Prints a table and writes ``results/chaos_soak.json`` and ``.md``.

    .venv/bin/python benchmarks/bench_chaos.py soak --calls 1000
"""

from __future__ import annotations

import argparse
import json
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="scenario", required=True)
    soak_parser = sub.add_parser("soak", help="N sandbox calls of a mix of programs; leaks and lateness")
    soak_parser.add_argument("--calls", type=int, default=1000)
    soak_parser.add_argument("--timeout", type=float, default=2.0)
    soak_parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    result = soak(args.calls, args.timeout)
    machine = common.machine_info()
    report = soak_report(result, machine)
    print(report)
    if not args.no_write:
        (common.RESULTS / "chaos_soak.json").write_text(json.dumps({"machine": machine, **result}, indent=1) + "\n")
        (common.RESULTS / "chaos_soak.md").write_text(report)


if __name__ == "__main__":
    main()
