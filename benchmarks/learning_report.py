"""bench_learning's report: ``learning.md`` and one ``learning_<start>.png`` per start, redrawn from every record of
the ``runs`` list of ``learning.json`` (its other keys, such as ``comparison``, are other scripts' and left alone). A
notes file beside it (``learning_notes.md``) holds the hand-written reading and survives each redraw.

Records are grouped by start, variant (:func:`variant`: the arm with its reward, dynamic sampling and series) and
steps: one row of the main table each, one curve of the start's plot. Then the stories start's yardsticks, one table
per series (:func:`series_table`) and the retrievals you can see (``learning_retrievals``).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path

import learning_retrievals
from common import STUDENT_T_95, with_notes

FRESH = "reward_only_fresh"  # the stories start's fresh reward-only questions: the demo's primary eval split


def write(results: Path, arm_order: Sequence[str] = ()) -> str:
    """learning.md and learning_<start>.png from every record in learning.json; ``arm_order`` orders a series'
    arms (others after them)."""
    data = json.loads((results / "learning.json").read_text())
    runs = data["runs"]
    groups: dict[tuple[str, str, int], list[dict]] = {}
    for run in runs:
        groups.setdefault((run["start"], variant(run), run["steps"]), []).append(run)
    lines = [
        "# GRPO vs RAPO on held-out templates",
        "",
        f"Task `{data['task']}` (train on training templates; evaluate greedy pass@1 with tools, no retrieval, on "
        f"held-out templates), model {data['model']}, LoRA r16. Produced by `benchmarks/bench_learning.py`; every "
        "run is a record in `learning.json` with its settings (difficulty of the training and of the held-out "
        "templates, G, learning rate, budgets).",
        "",
        "| start | arm | seeds | steps | held-out pass@1 before | final pass@1 (mean ± std) | steps to GRPO's final | "
        "train reward first→last | retrieval rate | Z > 0 share | truncated | step time s: generate / tools / "
        "retrieval / loss+other | wall s per run | other evals: pass@1 before → after (mean) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|",
    ]
    lines += [main_row(groups, key) for key in sorted(groups)]
    lines += stories_table(groups)
    for series in sorted({r["settings"].get("series") for r in runs if r["settings"].get("series")}):
        lines += series_table(runs, series, arm_order)
    lines += learning_retrievals.report_lines(groups)
    lines += ["", "Held-out questions per evaluation: " + ", ".join(sorted({str(r["eval_n"]) for r in runs})) + ".",
              "Machines: " + "; ".join(sorted({f"{r['machine']['platform']}, {r['machine']['cpus']} CPUs, torch "
                                               f"{r['machine']['torch']}, trl {r['machine']['trl']}" for r in runs})) + ".",
              ""]
    for start in sorted({s for s, _, _ in groups}):
        png = draw(groups, start, results)
        lines.append(f"![{start} start]({png.name})")
    text = with_notes("\n".join(lines) + "\n", results / "learning_notes.md")
    (results / "learning.md").write_text(text)
    return text


def main_row(groups: dict, key: tuple[str, str, int]) -> str:
    """One start and variant: held-out pass@1 before and after, when it reached GRPO's final, and what it cost."""
    (start, arm, steps), members = key, groups[key]
    mean, std = _mean_std([m["eval_pass1"][-1] for m in members])
    before = members[0]["eval_pass1"][0]
    grpo = groups.get((start, arm.replace("rapo", "grpo"), steps), [])
    grpo_final = _mean_std([m["eval_pass1"][-1] for m in grpo])[0] if grpo else float("nan")
    # Only meaningful when GRPO improved on the start: otherwise every curve "reaches" it at step 0.
    improved = grpo and arm.startswith("rapo") and grpo_final > before
    reach = next((s for s, v in _mean_curve(members) if v >= grpo_final), None) if improved else None
    rewards = [m["train_reward"] for m in members if m["train_reward"]]
    trend = (f"{statistics.fmean(r[0] for r in rewards):.2f}→{statistics.fmean(r[-1] for r in rewards):.2f}"
             if rewards else "-")
    steps_total = sum(m["steps"] for m in members)
    split = {k: sum(m["step_time_split_s"][k] for m in members) / steps_total
             for k in ("generate", "tools", "retrieval", "loss_and_other")}
    return (f"| {start} | {arm} | {len(members)} | {steps} | {before:.3f} | {mean:.3f} ± {std:.3f} | "
            f"{reach if reach is not None else '-'} | {trend} | "
            f"{statistics.fmean(m['retrieval_rate'] for m in members):.2f} | "
            f"{_mean_cell(members, 'z_positive_share')} | {_mean_cell(members, 'truncated_rate')} | "
            f"{split['generate']:.1f} / {split['tools']:.1f} / {split['retrieval']:.2f} / {split['loss_and_other']:.1f} | "
            f"{statistics.fmean(m['wall_s'] for m in members):.0f} | {_other_evals(members)} |")


def seed_interval(values: list[float]) -> tuple[float, float] | None:
    """95% interval of the mean over seeds (Student's t; None for a single seed): training-run randomness, on top
    of which each seed's own interval counts its questions."""
    if len(values) < 2:
        return None
    mean, std = _mean_std(values)
    half = STUDENT_T_95.get(len(values) - 1, 1.96) * std / math.sqrt(len(values))
    return mean - half, mean + half


def series_table(runs: list[dict], series: str, arm_order: Sequence[str] = ()) -> list[str]:
    """One series' arms side by side on the stories start (e.g. GRPO / RAPO / guided options): fresh
    reward-only mean@k per seed with its question-level interval, the mean over seeds with a t-interval, the gap to
    GRPO, held-out stories, and what the options did (signal, guided groups, guided tokens trained)."""
    members = [r for r in runs if r["settings"].get("series") == series and r["start"] == "stories" and "evals" in r]
    if not members:
        return []
    arms: dict[str, list[dict]] = {}
    for run in members:
        arms.setdefault(run["arm"], []).append(run)
    grpo = [_final(r, FRESH, "mean@k") for r in arms.get("grpo", []) if _final(r, FRESH, "mean@k") is not None]
    grpo_mean = statistics.fmean(grpo) if grpo else None
    first = members[0]["evals"][FRESH][0]
    k = first.get("k", "k")
    lines = ["", f"### Series `{series}`: fresh reward-only questions (mean@{k}), {first.get('questions')} questions",
             "", f"Before RL (the warm start): mean@{k} {first.get('mean@k', float('nan')):.3f}, greedy "
             f"{first.get('pass@1', float('nan')):.3f}. Every arm: {members[0]['steps']} steps of the same rollouts "
             "per step; seeds are the RL seed (the start and the questions are shared).", "",
             f"| arm | seeds | {FRESH} mean@{k} per seed (95% CI) | mean ± std | 95% CI over seeds | vs GRPO (points) | "
             f"{FRESH} greedy | heldout_stories mean@{k} | steps with signal | retrieval rate | guided groups | "
             "guided tokens/step | wall s/run |",
             "|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    order = ["grpo", "rapo", *arm_order]
    for arm in sorted(arms, key=lambda a: order.index(a) if a in order else len(order)):
        runs_ = sorted(arms[arm], key=lambda r: r["seed"])
        values = [_final(r, FRESH, "mean@k") for r in runs_]
        per_seed = "; ".join(f"s{r['seed']} {v:.3f} ({lo:.3f}-{hi:.3f})" for r, v in zip(runs_, values)
                             for lo, hi in [_final(r, FRESH, "mean@k_ci95") or (float("nan"),) * 2])
        mean, std = _mean_std(values)
        interval = seed_interval(values)
        greedy = _mean_std([_final(r, FRESH, "pass@1") for r in runs_])[0]
        stories = [v for v in (_final(r, "heldout", "mean@k") for r in runs_) if v is not None]
        averages = " | ".join(_mean_cell(runs_, key) for key in ("steps_with_signal", "retrieval_rate",
                                                                 "guided_group_share", "retrieved_tokens_learned"))
        lines.append(
            f"| {arm} | {len(runs_)} | {per_seed} | {mean:.3f} ± {std:.3f} | "
            f"{f'{interval[0]:.3f}-{interval[1]:.3f}' if interval else '-'} | "
            f"{f'{100 * (mean - grpo_mean):+.1f}' if grpo_mean is not None and arm != 'grpo' else '-'} | "
            f"{greedy:.3f} | {_mean_std(stories)[0]:.3f} | {averages} | "
            f"{statistics.fmean(r['wall_s'] for r in runs_):.0f} |")
    return lines


def stories_table(groups) -> list[str]:
    """The stories start's yardsticks: mean@k and greedy pass@1 on held-out stories, reward-only stories and
    held-out templates, before (the warm start) and after each arm (mean ± std over seeds)."""
    rows = [(arm, members) for (start, arm, _), members in sorted(groups.items()) if start == "stories"]
    if not rows:
        return []

    def cell(members, name, metric):
        # records from before the reward_only_fresh split kept fresh reward-only questions under "reward_only"
        values = [m["evals"].get(name, m["evals"].get("reward_only")) if name == FRESH else m["evals"].get(name)
                  for m in members if "evals" in m]
        values = [v for v in values if v]
        pairs = [(v[0].get(metric), v[-1].get(metric)) for v in values if isinstance(v[0], dict)]
        pairs = [p for p in pairs if None not in p]
        if not pairs:
            return "-"
        after_mean, after_std = _mean_std([a for _, a in pairs])
        return f"{pairs[0][0]:.3f} → {after_mean:.3f} ± {after_std:.3f}"

    def interval(members):
        values = [m["evals"]["heldout"][-1].get("mean@k_ci95") for m in members if "evals" in m]
        return "; ".join(f"{lo:.3f}-{hi:.3f}" for lo, hi in (v for v in values if v)) or "-"

    k = next((m["evals"]["heldout"][-1].get("k") for _, ms in rows for m in ms if "evals" in m), "k")
    lines = ["", f"### Stories start: known programs in new words (mean@{k} at the training temperature)", "",
             f"| arm | seeds | steps | heldout_stories mean@{k} before → after | 95% CI after, per seed | "
             f"heldout_stories pass@1 | {FRESH} mean@k | heldout_shapes pass@1 | wall s per run |",
             "|---|---:|---:|---|---|---|---|---|---:|"]
    for arm, members in rows:
        lines.append(f"| {arm} | {len(members)} | {members[0]['steps']} | {cell(members, 'heldout', 'mean@k')} | "
                     f"{interval(members)} | {cell(members, 'heldout', 'pass@1')} | "
                     f"{cell(members, FRESH, 'mean@k')} | {cell(members, 'heldout_shapes', 'pass@1')} | "
                     f"{statistics.fmean(m['wall_s'] for m in members):.0f} |")
    return lines


def variant(run: dict) -> str:
    """The arm as the report names it: ``grpo``/``rapo``/``sft``, with ``+closeness`` when RL trained on the
    outcome reward plus numeric closeness, and ``sft`` naming the RL variant whose time it matched."""
    suffix = ("+closeness" if run["settings"].get("reward", "outcome") == "closeness" else "") + (
        "+dynamic" if "dynamic_sampling_max_rounds" in run["settings"] else "") + (
        f" [{run['settings']['series']}]" if run["settings"].get("series") else "")
    if not suffix:
        return run["arm"]
    return f"sft (time of grpo{suffix})" if run["arm"] == "sft" else f"{run['arm']}{suffix}"


def draw(groups, start: str, results: Path) -> Path:
    """``learning_<start>.png``: held-out pass@1 per evaluation (mean ± std over seeds) and the train reward."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for (s, arm, steps_run), members in sorted(groups.items()):
        if s != start:
            continue
        steps = [x for x, _ in _mean_curve(members)]
        per_step = [[m["eval_pass1"][m["eval_steps"].index(x)] for m in members] for x in steps]
        mean = [statistics.fmean(v) for v in per_step]
        std = [statistics.stdev(v) if len(v) > 1 else 0.0 for v in per_step]
        line, = left.plot(steps, mean, marker="o", label=f"{arm}, {steps_run} steps ({len(members)} seeds)")
        left.fill_between(steps, [m - d for m, d in zip(mean, std)], [m + d for m, d in zip(mean, std)],
                          color=line.get_color(), alpha=0.15)
        length = min(len(m["train_reward"]) for m in members)
        if length:
            reward = [statistics.fmean(m["train_reward"][i] for m in members) for i in range(length)]
            right.plot(range(1, length + 1), reward, color=line.get_color(), label=arm)
    left.set(title=f"held-out-template pass@1 ({start} start)", xlabel="step", ylabel="pass@1 (greedy)")
    right.set(title="train reward (mean over seeds)", xlabel="step", ylabel="reward")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    png = results / f"learning_{start}.png"
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png


def _final(run: dict, name: str, metric: str):
    """``metric`` of the run's last evaluation on set ``name``, or None."""
    values = run["evals"].get(name) or []
    return values[-1].get(metric) if values and isinstance(values[-1], dict) else None


def _mean_std(values):
    if not values:
        return float("nan"), float("nan")
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def _mean_cell(runs: list[dict], key: str) -> str:
    """The mean of the runs' ``key`` to two decimals, ``-`` where none has it."""
    got = [r[key] for r in runs if r.get(key) is not None]
    return f"{statistics.fmean(got):.2f}" if got else "-"


def _other_evals(members) -> str:
    """``name before→after`` for each evaluation set besides held-out (the partial start's undemonstrated)."""
    names = sorted({name for m in members for name in m.get("extra_evals", {})})
    parts = []
    for name in names:
        runs = [m["extra_evals"][name]["pass1"] for m in members if name in m.get("extra_evals", {})]
        parts.append(f"{name} {statistics.fmean(r[0] for r in runs):.3f}→{statistics.fmean(r[-1] for r in runs):.3f}")
    return "; ".join(parts) or "-"


def _mean_curve(members) -> list[tuple[int, float]]:
    steps = members[0]["eval_steps"]
    if any(m["eval_steps"] != steps for m in members):
        steps = sorted(set.intersection(*(set(m["eval_steps"]) for m in members)))
    return [(s, statistics.fmean(m["eval_pass1"][m["eval_steps"].index(s)] for m in members)) for s in steps]
