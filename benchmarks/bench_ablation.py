"""RAPO taken apart on the demo recipe: which of its parts makes the policy worse than the GRPO it extends?

Every arm is the demo recipe (``configs/demo_cpu.yaml``) trained with ``rapo train`` from one SFT warm start (made by
the first arm, reused by the others through its cache key) and scored with ``rapo eval`` on the fresh questions of
RL's own stories (``reward_only_fresh``: greedy pass@1 and mean@4 at the training temperature), so what is measured
is what a user runs. Only the flags below differ between arms; the seed, steps and rollouts are the recipe's.

    grpo             no hybrid rows, p = 0: GRPO through RAPOTrainer
    rapo             the recipe as committed: N_hybrid = G/2, p = 0.5, a = 0.2, m = 0.05
    hybrid_p0        hybrid rows that never retrieve (p = 0): must train exactly as grpo (same rewards per step)
    retrieval_only   retrieval on, a = 0 and m = 0: the retrieved context alone
    z_only           retrieval on, a = 0.2, m = 0: the retrieval reward's advantage reweighting alone
    shaping_only     retrieval on, a = 0, m = 0.05: the shaped importance ratio alone
    no_answer_steps  the recipe, with a store from which every step holding a final answer (``<answer>``) is removed
    own_question     the recipe with retrieve_own_question

Each finished arm is appended to ``benchmarks/results/ablation.json`` (its per-step training log, its eval), and
``ablation.md`` is redrawn from all records.

    .venv/bin/python benchmarks/bench_ablation.py --workdir runs/ablation --arms grpo rapo retrieval_only
    .venv/bin/python benchmarks/bench_ablation.py --report-only
"""

from __future__ import annotations

import argparse
import json
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
    store_built_once,
    train_from_shared_warm_start,
    update_results,
    use_offline_environment,
)

use_offline_environment()

RECIPE = "configs/demo_cpu.yaml"
RETRIEVAL_OFF = ["--num_hybrid_generations", "0", "--retrieve_prob", "0"]
ARMS = {
    "grpo": RETRIEVAL_OFF,
    "rapo": [],
    "hybrid_p0": ["--retrieve_prob", "0"],
    "retrieval_only": ["--retrieval_advantage_weight", "0", "--importance_shaping_weight", "0"],
    "z_only": ["--importance_shaping_weight", "0"],
    "shaping_only": ["--retrieval_advantage_weight", "0"],
    "no_answer_steps": [],
    "own_question": ["--retrieve_own_question", "true"],
}
"""Arm -> the flags it adds to the recipe."""
NO_ANSWER_STORE = "store-no-answer-steps"
WARM_START_DIR = "sft-warm-start"
EVAL_SPLIT = "reward_only_fresh"
LOGGED = ("reward", "rapo/reward_on_policy", "rapo/reward_hybrid_retrieved", "rapo/retrieved_answer_share",
          "rapo/retrieved_own_question_share", "rapo/positive_advantage_share_retrieved", "rapo/retrieval_rate",
          "tools/failure_frequency", "rapo/step_has_signal")
JSON_PATH = RESULTS / "ablation.json"
MD_PATH = RESULTS / "ablation.md"


def main(argv=None) -> None:
    args = parse_args(argv)
    if not args.report_only:
        workdir = Path(args.workdir)
        store = store_built_once(workdir, RECIPE)
        for arm in args.arms:
            record = run_arm(arm, workdir, store, args.steps)
            update_results(JSON_PATH, lambda records, r=record: records.append(r), empty=list)
            write_report()
            print(f"ablation: {arm} done, mean@4 {record['eval']['trained'].get('mean@k')}", flush=True)
        if args.eval_warm_start:
            record = eval_warm_start(workdir, store)
            update_results(JSON_PATH, lambda records, r=record: records.append(r), empty=list)
    write_report()


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default="runs/ablation")
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--eval-warm-start", action="store_true", help="also score the warm start, once")
    parser.add_argument("--report-only", action="store_true")
    return parser.parse_args(argv)


def store_without_answer_steps(workdir: Path, store: Path) -> Path:
    """A copy of ``store`` whose RL collection lacks every record holding a final answer."""
    target = workdir / NO_ANSWER_STORE
    if target.exists():
        return target
    shutil.copytree(store, target)
    import chromadb

    traces = chromadb.PersistentClient(path=str(target)).get_collection("traces")  # no embedding: read and delete
    found = traces.get(include=["metadatas"])
    answers = [i for i, metadata in zip(found["ids"], found["metadatas"], strict=True)
               if "<answer>" in metadata["value"]]
    traces.delete(ids=answers)
    print(f"ablation: {len(answers)} of {len(found['ids'])} records hold a final answer; removed in {target}")
    return target


def run_arm(arm: str, workdir: Path, store: Path, steps: int) -> dict:
    output = workdir / arm
    arm_store = store_without_answer_steps(workdir, store) if arm == "no_answer_steps" else store
    train_seconds, _ = train_from_shared_warm_start(output, workdir / WARM_START_DIR, "--config", RECIPE, "--store_path",
                                                    str(arm_store), "--max_steps", str(steps), "--sft_same_time",
                                                    "false", *ARMS[arm])
    scores, eval_seconds = evaluate(output, arm_store)
    logs = [e for e in json.loads((output / "trainer_state.json").read_text())["log_history"] if "reward" in e]
    return {"arm": arm, "flags": ARMS[arm], "steps": steps, "machine": machine_info(),
            "train_seconds": round(train_seconds, 1), "eval_seconds": round(eval_seconds, 1),
            "per_step": {name: [e.get(name) for e in logs] for name in LOGGED}, "eval": scores,
            "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def evaluate(model: Path, store: Path) -> tuple[dict, float]:
    started = time.perf_counter()
    run_rapo("eval", "--config", RECIPE, "--eval_model", str(model), "--store_path", str(store),
         "--eval_splits", EVAL_SPLIT, "--eval_base", "false", "--eval_sampled_models", "trained",
         "--eval_report", "")
    payload = json.loads((model / "eval_results.json").read_text())
    return payload["sets"][EVAL_SPLIT]["rows"], time.perf_counter() - started


def eval_warm_start(workdir: Path, store: Path) -> dict:
    scores, seconds = evaluate(workdir / WARM_START_DIR, store)
    return {"arm": "warm_start", "flags": [], "steps": 0, "machine": machine_info(), "eval_seconds": round(seconds, 1),
            "per_step": {}, "eval": scores, "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def _cell(value, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def write_report() -> None:
    records = json.loads(JSON_PATH.read_text()) if JSON_PATH.exists() else []
    rows = []
    for record in records:
        trained = record["eval"]["trained"]
        interval = trained.get("mean@k_ci95") or [None, None]
        steps = record["per_step"]
        rows.append([record["arm"], " ".join(record["flags"]) or "-",
                     f"{_cell(trained.get('mean@k'))} ({_cell(interval[0])}-{_cell(interval[1])})",
                     f"{trained.get('correct', '-')}/{trained.get('n', '-')}",
                     _cell(_mean(steps.get("rapo/reward_on_policy", []))),
                     _cell(_mean(steps.get("rapo/reward_hybrid_retrieved", []))),
                     _cell(_mean(steps.get("rapo/retrieved_answer_share", []))),
                     _cell(_mean(steps.get("rapo/positive_advantage_share_retrieved", []))),
                     " ".join(_cell(r, 2) for r in steps.get("reward", []))])
    header = ["arm", "flags", f"mean@4 {EVAL_SPLIT} (95% CI)", "greedy", "on-policy reward", "retrieved-row reward",
              "answer share", "credit to retrieved rows", "reward per step"]
    machine = records[-1]["machine"] if records else {}
    MD_PATH.write_text(
        "# RAPO taken apart on the demo recipe\n\n"
        f"`benchmarks/bench_ablation.py` (see its docstring). Machine of the last record: {machine.get('cpu', '?')}, "
        f"{machine.get('cpus', '?')} cores, native bf16 {machine.get('native_bf16', '?')}. Means over the steps where a metric was logged. "
        "What it shows: [`ablation_notes.md`](ablation_notes.md).\n\n"
        + "\n".join(markdown_table(header, rows)) + "\n")


if __name__ == "__main__":
    main()
