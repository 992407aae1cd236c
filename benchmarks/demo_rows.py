"""docs/benchmarks.md's `make demo` rows, written from the result files they cite (``results/demo_eval.json`` and
``results/demo_eval.md``), so that they cannot go stale: ``python benchmarks/demo_rows.py`` rewrites them in place,
``tests/benchmarks/test_demo_rows.py`` holds the page equal to what this writes."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
PAGE = RESULTS.parent.parent / "docs" / "benchmarks.md"
ROW_START = "| `make demo`"
"""What the demo's rows of the page's tables begin with."""

MODELS = {"warm_start": "warm start", "sft_on_store": "SFT on the store", "sft_same_time": "equal-time SFT",
          "grpo_same_rollouts": "GRPO baseline", "trained": "trained"}
"""The models `rapo eval` scores beside the base, as the page names them, in its order."""
SFT_RUNS = {"warm_start_sft": "warm-start SFT", "sft_on_store_sft": "SFT on the store",
            "sft_same_time_sft": "equal-time SFT"}
"""The SFT runs' histories an eval report carries, as the page names them."""
SETS = {"reward_only_fresh": "fresh reward-only questions", "heldout_stories": "held-out stories",
        "heldout_shapes": "held-out templates"}


def _interval(low_high) -> str:
    return f"{low_high[0]:.3f}-{low_high[1]:.3f}"


def _scored_by(rows: dict, k) -> tuple[str, str]:
    """The score models are compared on, and its interval's key: mean@k where the eval sampled, else greedy pass@1."""
    if k and any("mean@k" in row for row in rows.values()):
        return "mean@k", "mean@k_ci95"
    return "pass@1", "pass@1_ci95"


def _verdict(rows: dict, interval: str) -> str:
    """Where the trained model stands against each baseline, by whether their 95% intervals (``interval``) meet."""
    trained = rows["trained"][interval]
    above = [MODELS[m] for m in MODELS if m != "trained" and interval in rows.get(m, {})
             and trained[0] > rows[m][interval][1]]
    below = [MODELS[m] for m in MODELS if m != "trained" and interval in rows.get(m, {})
             and trained[1] < rows[m][interval][0]]
    if not above and not below:
        return "**No difference beyond noise.**"
    parts = ([f"above {', '.join(above)}"] if above else []) + ([f"below {', '.join(below)}"] if below else [])
    return f"**Trained {' and '.join(parts)} beyond noise** (95% intervals apart)."


def verdict(report: dict) -> str:
    """Where the trained model stands against the others on the report's primary set (what README states)."""
    rows = report["sets"][report["split"]]["rows"]
    return _verdict(rows, _scored_by(rows, report["k"])[1])


def demo_rows(report: dict, markdown: str) -> list[str]:
    """The page's `make demo` rows for the eval report ``report`` and its markdown ``markdown``."""
    primary, k = report["split"], report["k"]
    rows = report["sets"][primary]["rows"]
    score, interval = _scored_by(rows, k)
    if score == "mean@k":
        temperature = re.search(rf"{primary}, n=\d+, mean@{k} at T=([\d.]+)", markdown).group(1)
        scored = f"mean@{k} at T = {temperature}"
    else:
        scored = "greedy pass@1"
    models = [m for m in MODELS if m in rows]
    means = ", ".join(f"{MODELS[m]} {rows[m][score]:.3f} ({_interval(rows[m][interval])})" for m in models)
    greedy = "; ".join(
        f"{SETS.get(name, name)} greedy " + ", ".join(f"{s['rows'][m]['correct']}/{s['n']}" for m in models)
        for name, s in report["sets"].items())
    base = {s["rows"]["base"]["correct"] for s in report["sets"].values() if "base" in s["rows"]}
    base_text = "; base 0 everywhere" if base == {0} else ""
    outcome = (f"{SETS.get(primary, primary)} (n = {report['sets'][primary]['n']}) {scored}: "
               f"{means}; {greedy} ({', '.join(MODELS[m] for m in models)}){base_text}. {_verdict(rows, interval)}")
    seconds = report["run_seconds"]
    sft_runs = ", ".join(f"{label} {report[key]['steps']} steps {report[key]['seconds']} s"
                         for key, label in SFT_RUNS.items() if key in report)
    time = (f"{seconds['total']} s (build-store {seconds['build_store']} s, train {seconds['train']} s, eval "
            f"{seconds['eval']} s); {sft_runs}")
    training = "; ".join(
        f"{'RAPO' if name == 'trained' else MODELS.get(name, name)} {len(steps)} steps, reward per step "
        + " ".join(f"{step['reward']:.3f}" for step in steps)
        for name, steps in report["training"].items())
    return [
        f"| `make demo` (stories split, fresh reward-only questions primary): outcome | {outcome} | "
        "`rm -rf runs/demo && make demo` | [`demo_eval.md`](../benchmarks/results/demo_eval.md) |",
        f"| `make demo`: time | {time} | same | [`demo_eval.json`](../benchmarks/results/demo_eval.json) "
        "`run_seconds`, `*_sft` |",
        f"| `make demo`: training | {training} | same | [`demo_eval.json`](../benchmarks/results/demo_eval.json) "
        "`training` |",
    ]


def current_rows() -> list[str]:
    """The rows the committed result files give."""
    report = json.loads((RESULTS / "demo_eval.json").read_text())
    return demo_rows(report, (RESULTS / "demo_eval.md").read_text())


def rewrite(page: str, rows: list[str]) -> str:
    """``page`` with its `make demo` rows replaced by ``rows``, where the first of them was."""
    lines = page.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(ROW_START))
    kept = [line for line in lines if not line.startswith(ROW_START)]
    return "\n".join(kept[:first] + rows + kept[first:]) + "\n"


if __name__ == "__main__":
    PAGE.write_text(rewrite(PAGE.read_text(), current_rows()))
    print(f"{PAGE}: {len(current_rows())} `make demo` rows written", file=sys.stderr)
