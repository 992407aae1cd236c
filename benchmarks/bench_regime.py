"""Where can retrieval teach? Candidate regimes measured at the warm start, before any training.

For each regime (how many tool steps the expert's solution takes, the difficulty, where hybrid rows retrieve, the
warm start's length) this builds the regime's store with ``rapo build-store`` and rolls out RL's own training
questions from its warm start with ``rapo train --learning_rate 0`` (the policy never moves, so every step samples the
warm start), ``--log_completions true`` writing each row's reward and what it was shown. It reports per regime:
the on-policy success rate, the success rate of hybrid rows shown a stored step (and the difference, with a 95%
interval), the share of retrieved steps that hold the final answer and the share from the row's own question.
A row succeeds when its outcome reward is at least 1 (the boxed answer right; the multi-tool bonus may add 0.1).

    .venv/bin/python benchmarks/bench_regime.py --workdir runs/regime               # every regime
    .venv/bin/python benchmarks/bench_regime.py --regimes one_d1 per_op_d1 --steps 8
    .venv/bin/python benchmarks/bench_regime.py --report-only
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    RESULTS,
    machine_info,
    markdown_table,
    run_rapo,
    update_results,
    use_offline_environment,
    with_notes,
)

use_offline_environment()

RECIPE = "configs/demo_cpu.yaml"
OWN = ["--retrieve_own_question", "true"]
COMPARISON_BUDGET = ["--max_tool_calls", "3", "--max_completion_length", "448"]
"""The comparison recipe's budgets (``configs/comparison_cpu.yaml``): a third call to rewrite a failed program."""
RETRIEVED_IN_WARM_START = ["--sft_retrieved_share", "0.5"]
"""Half the demonstrated questions get a second warm-start example with a retrieved step, so the policy has seen
one and goes on after it (``rapo_trl.cli.retrieved_examples``)."""
REGIMES = {
    "one_d1": {"store": ["--task_tool_steps", "one"], "train": [], "warm_steps": 60},
    "one_d1_own": {"store": ["--task_tool_steps", "one"], "train": OWN, "warm_steps": 60},
    "per_op_d1": {"store": ["--task_tool_steps", "per_operation"], "train": OWN, "warm_steps": 60},
    "per_op_d1_plan": {"store": ["--task_tool_steps", "per_operation"],
                       "train": [*OWN, "--retrieve_at", "plan", "tool_step"], "warm_steps": 60},
    "per_op_d2": {"store": ["--task_tool_steps", "per_operation", "--task_difficulty", "2"], "train": OWN,
                  "warm_steps": 60},
    "one_d1_warm120": {"store": ["--task_tool_steps", "one"], "train": [], "warm_steps": 120},
    "per_op_d1_warm120": {"store": ["--task_tool_steps", "per_operation"], "train": OWN, "warm_steps": 120},
    "per_op_d1_plan_warm120": {"store": ["--task_tool_steps", "per_operation"],
                               "train": [*OWN, "--retrieve_at", "plan", "tool_step"], "warm_steps": 120},
    "per_op_d1_plan_only_warm120": {"store": ["--task_tool_steps", "per_operation"],
                                    "train": [*OWN, "--retrieve_at", "plan"], "warm_steps": 120},
    "per_op_d1_warm120_calls3": {"store": ["--task_tool_steps", "per_operation"],
                                 "train": [*OWN, *COMPARISON_BUDGET], "warm_steps": 120},
    "per_op_d1_plan_warm120_calls3": {"store": ["--task_tool_steps", "per_operation"],
                                      "train": [*OWN, "--retrieve_at", "plan", "tool_step", *COMPARISON_BUDGET],
                                      "warm_steps": 120},
    **{f"per_op_d1_{where}_warm{steps}_retrieved_calls3{suffix}": {
        "store": ["--task_tool_steps", "per_operation"], "train": [*OWN, *boundaries, *COMPARISON_BUDGET, *sampling],
        "warm_steps": steps, "warm": RETRIEVED_IN_WARM_START}
       for where, boundaries in (("plan_only", ["--retrieve_at", "plan"]), ("tool_step", []),
                                 ("plan", ["--retrieve_at", "plan", "tool_step"]))
       for steps in (120, 240)
       for suffix, sampling in (("", []), ("_t1", ["--temperature", "1.0"]))},
}
"""Regime -> the flags of its store (build-store and train alike), the flags of train alone, the warm start's steps
and the flags of the warm start alone (``warm``, none when absent)."""
SUCCESS = 1.0
WARM_START_DIR = "sft-warm-start"
RAPO_COLUMNS = ("rapo_hybrid", "rapo_stored_steps_shown", "rapo_answer_step_shown")
"""RAPOTrainer's columns of the completions table (``rapo_trl.trainer.retrieval_view.completion_columns``)."""
JSON_PATH = RESULTS / "learning_regime.json"
MD_PATH = RESULTS / "learning_regime.md"


def main(argv=None) -> None:
    args = parse_args(argv)
    if not args.report_only:
        for name in args.regimes:
            record = measure(name, Path(args.workdir), args.steps)
            update_results(JSON_PATH, lambda records, r=record: records.append(r), empty=list)
            write_report()
    write_report()


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default="runs/regime")
    parser.add_argument("--regimes", nargs="+", default=list(REGIMES), choices=list(REGIMES))
    parser.add_argument("--steps", type=int, default=8, help="steps of 16 rows: 8 gives 128 rows")
    parser.add_argument("--report-only", action="store_true")
    return parser.parse_args(argv)


def measure(name: str, workdir: Path, steps: int) -> dict:
    regime = REGIMES[name]
    store_flags = [*regime["store"]]
    store = workdir / ("store-" + "-".join(flag.strip("-") for flag in store_flags))
    if not store.exists():
        run_rapo("build-store", "--config", RECIPE, "--store_path", str(store), *store_flags)
    output = workdir / name
    if output.exists():
        shutil.rmtree(output)
    # Regimes with the same store and warm-start length share one warm start: its cache key matches, so train
    # reuses the copy instead of training it again.
    warm_flags = regime.get("warm", [])
    shared_warm_start = workdir / "-".join(["warm-start", store.name, str(regime["warm_steps"]),
                                            *(flag.strip("-") for flag in warm_flags)])
    if shared_warm_start.exists():
        shutil.copytree(shared_warm_start, output / WARM_START_DIR)
    started = time.perf_counter()
    run_rapo("train", "--config", RECIPE, "--output_dir", str(output), "--store_path", str(store), *store_flags,
             *regime["train"], *warm_flags, "--sft_warmup_steps", str(regime["warm_steps"]), "--sft_same_time", "false",
             "--max_steps", str(steps), "--learning_rate", "0", "--log_completions", "true")
    if not shared_warm_start.exists():
        shutil.copytree(output / WARM_START_DIR, shared_warm_start)
    rows = completion_rows(output)
    logs = [e for e in json.loads((output / "trainer_state.json").read_text())["log_history"] if "reward" in e]
    return {"regime": name, **regime, "steps": steps, "rows": len(rows), "seconds": round(time.perf_counter() - started),
            "machine": machine_info(), **summary(rows, logs)}


def completion_rows(output: Path) -> list[dict]:
    """Every rolled-out row of the run: TRL's completions tables (one a logged step) with RAPO's columns."""
    import pandas as pd

    tables = [pd.read_parquet(path) for path in sorted((output / "completions").glob("completions_*.parquet"))]
    return pd.concat(tables).to_dict("records") if tables else []


def reward_of(row: dict) -> float:
    """The row's outcome reward: the one reward function's column (the recipe trains on one)."""
    known = {"step", "prompt", "completion", "advantage", *RAPO_COLUMNS}
    scores = [value for key, value in row.items()
              if key not in known and isinstance(value, (int, float)) and not isinstance(value, bool)]
    if len(scores) != 1:
        raise ValueError(f"expected one reward column, found {len(scores)} in {sorted(row)}")
    return float(scores[0])


def summary(rows: list[dict], logs: list[dict]) -> dict:
    on_policy = [reward_of(r) >= SUCCESS for r in rows if not r["rapo_hybrid"]]
    shown = [reward_of(r) >= SUCCESS for r in rows if r["rapo_hybrid"] and r["rapo_stored_steps_shown"] > 0]
    answer_rows = [r["rapo_answer_step_shown"] for r in rows if r["rapo_hybrid"] and r["rapo_stored_steps_shown"] > 0]
    own = [e["rapo/retrieved_own_question_share"] for e in logs if "rapo/retrieved_own_question_share" in e]
    entropy = [e["entropy"] for e in logs if "entropy" in e]
    answer = [e["rapo/retrieved_answer_share"] for e in logs if "rapo/retrieved_answer_share" in e]
    return {
        "on_policy": [sum(on_policy), len(on_policy)],
        "shown_a_stored_step": [sum(shown), len(shown)],
        "difference_ci95": difference_interval(sum(shown), len(shown), sum(on_policy), len(on_policy)),
        "rows_shown_an_answer_step": [sum(answer_rows), len(answer_rows)],
        "answer_share": sum(answer) / len(answer) if answer else None,
        "own_question_share": sum(own) / len(own) if own else None,
        "groups_with_signal": groups_with_signal(rows, hybrid=False),
        "groups_with_signal_hybrid": groups_with_signal(rows, hybrid=True),
        "entropy": sum(entropy) / len(entropy) if entropy else None,
    }


def groups_with_signal(rows: list[dict], hybrid: bool) -> list[int]:
    """[groups whose rows' rewards differ, groups]: GRPO's advantage is zero in a group of equal rewards. The
    on-policy rows of each group alone (what GRPO would sample), or with ``hybrid`` every row of the group."""
    groups: dict[tuple, list[float]] = {}
    for r in rows:
        if hybrid or not r["rapo_hybrid"]:
            groups.setdefault((r["step"], str(r["prompt"])), []).append(reward_of(r))
    return [sum(len(set(rewards)) > 1 for rewards in groups.values()), len(groups)]


def difference_interval(a: int, n: int, b: int, m: int, z: float = 1.96) -> list[float] | None:
    """A 95% interval of the difference of two success rates a/n - b/m (Newcombe's hybrid of Wilson intervals)."""
    if not n or not m:
        return None
    from rapo_trl.evaluation import wilson_interval

    p, q = a / n, b / m
    (lo1, hi1), (lo2, hi2) = wilson_interval(a, n, z), wilson_interval(b, m, z)
    low = p - q - math.sqrt((p - lo1) ** 2 + (hi2 - q) ** 2)
    high = p - q + math.sqrt((hi1 - p) ** 2 + (q - lo2) ** 2)
    return [round(low, 3), round(high, 3)]


def _rate(pair) -> str:
    successes, n = pair
    return f"{successes / n:.3f} ({successes}/{n})" if n else "-"


def write_report() -> None:
    records = json.loads(JSON_PATH.read_text()) if JSON_PATH.exists() else []
    header = ["regime", "store flags", "train flags", "warm start", "on-policy success", "success shown a stored step",
              "difference (95% CI)", "rows shown an answer step", "answer share", "own-question share",
              "on-policy groups with signal", "groups with signal", "entropy"]
    rows = []
    for r in records:
        interval = r["difference_ci95"]
        difference = "-" if interval is None else (
            f"{r['shown_a_stored_step'][0] / r['shown_a_stored_step'][1] - r['on_policy'][0] / r['on_policy'][1]:+.3f} "
            f"({interval[0]:+.3f} to {interval[1]:+.3f})")
        warm = " ".join([f"{r['warm_steps']} steps", *r.get("warm", [])])
        rows.append([r["regime"], " ".join(r["store"]) or "-", " ".join(r["train"]) or "-", warm,
                     _rate(r["on_policy"]), _rate(r["shown_a_stored_step"]), difference,
                     _rate(r["rows_shown_an_answer_step"]),
                     "-" if r["answer_share"] is None else f"{r['answer_share']:.2f}",
                     "-" if r["own_question_share"] is None else f"{r['own_question_share']:.2f}",
                     *(_rate(r[key]) if key in r else "-" for key in ("groups_with_signal", "groups_with_signal_hybrid")),
                     "-" if r.get("entropy") is None else f"{r['entropy']:.3f}"])
    machine = records[-1]["machine"] if records else {}
    MD_PATH.write_text(with_notes(
        "# Where can retrieval teach? Regimes at the warm start, before training\n\n"
        "`benchmarks/bench_regime.py` (its docstring says how): RL's own training questions rolled out from each "
        "regime's warm start with the learning rate 0 (no update), the demo recipe otherwise. "
        f"Machine of the last record: {machine.get('cpu', '?')}, {machine.get('cpus', '?')} cores.\n\n"
        + "\n".join(markdown_table(header, rows)) + "\n", MD_PATH.with_name("learning_regime_notes.md")))


if __name__ == "__main__":
    main()
