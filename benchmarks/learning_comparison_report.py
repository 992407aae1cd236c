"""The comparison's report: one table over arms per code version and warm start (seeds pooled, intervals over seeds)
and the reward curves.

Written by ``bench_comparison.py`` from every record of the ``comparison`` list in ``learning.json``; a notes file
beside the report (``learning_comparison_notes.md``) holds the hand-written reading and survives each redraw.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from pathlib import Path

from common import machine_line, markdown_table, with_notes
from learning_goals import fixed_picks, goal_section, picks_section
from learning_stages import (
    FRESH,
    by_warm_start,
    cell,
    interval_cell,
    joined_versions,
    on_policy,
    rescored_section,
    same_code_versions,
    screen_section,
)
from paired_questions import paired_text, per_question_difference

HELDOUT = "heldout_stories"
SMOOTHING = 5
"""Steps in the moving average of the reward curves: a step's 16 rows are too few to compare curves step by step."""


def write(records: list[dict], md_path: Path, png_path: Path, arms: Sequence[str],
          rescored: Sequence[dict] = ()) -> None:
    """The report of every record, one table per code version the runs ran on (newest first; ``arms`` in order), with
    the lever screen's decision and the ``rescored`` scores of that version beside it."""
    same = same_code_versions(records)
    rescored = [{**r, "code": same.get(r.get("code"), r.get("code"))} for r in rescored]
    records, joined = joined_versions(records)
    versions = list(dict.fromkeys(r.get("code", "?") for r in reversed(records)))
    lines = ["# RAPO against GRPO and SFT-then-GRPO, seeds side by side", "",
             "`benchmarks/bench_comparison.py` (its docstring says how): each run is `rapo train` on "
             "`configs/comparison_cpu.yaml` with the arm's flags, then `rapo eval` of the trained model. Intervals "
             "are over seeds (Student's t); the difference to GRPO pairs runs of the same seed. The per-question "
             "differences pair each fresh question's mean@4 with the reference's of the same seed and question, the "
             "interval a bootstrap over questions (a question's seeds resampled together). Runs compare only "
             "within one code version (the git tree of `src` and the recipe's settings) and one warm start: one "
             "section per version, newest first, and in it one table per warm start; a later version whose GRPO and "
             "SFT-then-GRPO seed 0 repeat an earlier one's step for step joins its section.", ""]
    for index, version in enumerate(versions):
        members = [r for r in records if r.get("code", "?") == version]
        runs = [r for r in members if r["arm"] != "warm_start"]
        lines += [f"## Code {version}", "", "Commits: " + ", ".join(sorted({r["commit"][:10] for r in members}))
                  + (f". Machine of the last run: {machine_line(runs[-1]['machine'])}." if runs else "."), ""]
        lines += [f"Code {later} repeats this version (GRPO and SFT-then-GRPO seed 0: the same reward and loss at "
                  "every step), so its runs are in this version's tables; where both ran an arm and seed from one "
                  "warm start, this version's run is shown." for later in joined.get(version, [])]
        lines += [""] if version in joined else []
        picks = fixed_picks(members)
        groups = by_warm_start(members)
        for position, (warm_start, group) in enumerate(groups.items()):
            plot = _section_plot(png_path, version, warm_start, index, position)
            heading = _warm_start_heading(warm_start, group) if len(groups) > 1 else None
            lines += _arms_section(group, arms, plot, heading)
            if not picks:
                lines += screen_section(group, markdown_table, picks=position == 0,
                                        heading="####" if heading else "###")
        lines += picks_section(picks) if picks else []
        version_rescored = [r for r in rescored if r.get("code", "?") == version]
        lines += rescored_section(version_rescored, markdown_table, _per_question)
        lines += goal_section(members, version_rescored, markdown_table)
    lines += [f"Final on-policy reward: mean over the last {SMOOTHING} steps and the seeds; the first step at GRPO's "
              f"final reward reads the seed-mean on-policy reward, a {SMOOTHING}-step moving average.", ""]
    text = with_notes("\n".join(lines), md_path.with_name("learning_comparison_notes.md"))
    md_path.write_text(text)
    drop_unlinked_plots(png_path, text)


def drop_unlinked_plots(png_path: Path, text: str) -> list[Path]:
    """Remove the version plots beside ``png_path`` that the report no longer links, returning them: a section's plot
    is named by its place among the versions (the newest one's is ``png_path``), so when another version's run lands
    the plots move, and one left behind would show curves no table reads."""
    stale = [path for path in sorted(png_path.parent.glob(f"{png_path.stem}_*{png_path.suffix}"))
             if f"]({path.name})" not in text]
    for path in stale:
        path.unlink()
    return stale


def version_plot(png_path: Path, version: str) -> Path:
    """The plot of an older version's table, beside the newest one's ``png_path``: each line of the protocol (one code
    version and one arithmetic) keeps its curves when another line's runs land after it."""
    return png_path.with_name(f"{png_path.stem}_{version}{png_path.suffix}")


def _section_plot(png_path: Path, version: str, warm_start: str, version_index: int, position: int) -> Path:
    """The plot of a version's table for one warm start: ``png_path`` for the newest version's first, the version's
    own name for an older version's first, the version's and the warm start's for any later one."""
    if position > 0:
        return version_plot(png_path, f"{version}_{re.sub(r'[^A-Za-z0-9]+', '-', warm_start).strip('-')}")
    return png_path if version_index == 0 else version_plot(png_path, version)


def _warm_start_heading(warm_start: str, records: list[dict]) -> str:
    """A warm start's subsection in a version's section: by its fingerprint where its runs carry one (rebuilt on
    another CPU), else by the CPU it was built on."""
    if any("warm_start" in r for r in records):
        return f"### From warm start {warm_start}, rebuilt on {records[0].get('machine', {}).get('cpu', '?')}"
    return f"### From the warm start built on {warm_start}"


def _arms_section(records: list[dict], arms: Sequence[str], png_path: Path, heading: str | None) -> list[str]:
    """The arms' table and curves of one code version's runs from one warm start: pairs (the differences to GRPO and
    SFT-then-GRPO) never cross warm starts."""
    runs = [r for r in records if r["arm"] != "warm_start"]
    by_arm = {arm: sorted((r for r in runs if r["arm"] == arm), key=lambda r: r["seed"]) for arm in arms}
    by_arm = {arm: members for arm, members in by_arm.items() if members}
    warm = [r for r in records if r["arm"] == "warm_start"]
    lines = [heading, ""] if heading else []
    lines += markdown_table(
        ["arm", "flags", "seeds", f"{FRESH} mean@4 per seed", "mean@4 (95% CI over seeds)",
         "minus GRPO (95% CI, paired)", "minus GRPO, per question", "minus SFT-then-GRPO, per question",
         f"{FRESH} greedy", f"{HELDOUT} greedy", "final on-policy reward",
         "first step at GRPO's final reward", "answer share", "credit to retrieved rows"],
        [_row(arm, members, by_arm) for arm, members in by_arm.items()]
        + [_warm_row(record) for record in warm[-1:]])
    lines.append("")
    if runs and _draw(by_arm, png_path):
        lines += [f"![on-policy reward per step]({png_path.name})", ""]
    return lines


RUN_FLAGS = ("--seed", "--sft_seed", "--max_steps", "--sft_same_time")
"""Flags every run sets (with their values): the arm's own flags are the others."""


def _arm_flags(record: dict) -> list[str]:
    flags, own = record["flags"], []
    index = 0
    while index < len(flags):
        if flags[index] in RUN_FLAGS:
            index += 2
            continue
        own.append(flags[index])
        index += 1
    return own


def _row(arm: str, members: list[dict], by_arm: dict[str, list[dict]]) -> list[str]:
    grpo = by_arm.get("grpo", [])
    fresh = [m["eval"][FRESH]["mean@k"] for m in members]
    grpo_by_seed = {g["seed"]: g["eval"][FRESH]["mean@k"] for g in grpo}
    paired = [f - grpo_by_seed[m["seed"]] for f, m in zip(fresh, members, strict=True) if m["seed"] in grpo_by_seed]
    curve, grpo_curve = _mean_curve(members), _mean_curve(grpo)
    final = _final(curve)
    return [arm, " ".join(_arm_flags(members[0])) or "-", str(len(members)), " ".join(f"{v:.3f}" for v in fresh),
            interval_cell(fresh), "-" if arm == "grpo" else interval_cell(paired, signed=True),
            *(_per_question(members, by_arm.get(reference, [])) if arm != reference else "-"
              for reference in ("grpo", "sft_then_grpo")),
            _pooled(members, FRESH), _pooled(members, HELDOUT), cell(final),
            _first_reaching(curve, _final(grpo_curve)),
            cell(_mean(_step_values(members, "rapo/retrieved_answer_share"))),
            cell(_mean(_step_values(members, "rapo/positive_advantage_share_retrieved")))]


def _per_question(members: list[dict], references: list[dict]) -> str:
    return paired_text(per_question_difference(members, references))


def _warm_row(record: dict) -> list[str]:
    fresh = record["eval"][FRESH]
    interval = fresh.get("mean@k_ci95") or [None, None]
    return ["warm start", "-", "-", f"{fresh['mean@k']:.3f}",
            f"{fresh['mean@k']:.3f} ({cell(interval[0])} to {cell(interval[1])}, over questions)", "-", "-", "-",
            _pooled([record], FRESH), _pooled([record], HELDOUT), "-", "-", "-", "-"]


def _pooled(members: list[dict], split: str) -> str:
    correct = sum(m["eval"][split]["correct"] for m in members)
    return f"{correct}/{sum(m['eval'][split]['n'] for m in members)}"


def _mean_curve(members: list[dict]) -> list[float]:
    curves = [on_policy(m) for m in members]
    length = min((len(c) for c in curves), default=0)
    return [statistics.fmean(c[i] for c in curves) for i in range(length)]


def _final(curve: list[float]) -> float | None:
    return statistics.fmean(curve[-SMOOTHING:]) if curve else None


def _first_reaching(curve: list[float], target: float | None) -> str:
    if target is None:
        return "-"
    for end in range(SMOOTHING, len(curve) + 1):
        if statistics.fmean(curve[end - SMOOTHING:end]) >= target:
            return str(end)
    return "never"


def _step_values(members: list[dict], name: str) -> list[float]:
    return [v for m in members for v in m["per_step"].get(name, []) if v is not None]


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _draw(by_arm: dict[str, list[dict]], png_path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, axes = plt.subplots(figsize=(7, 4))
    for arm, members in by_arm.items():
        curve = _mean_curve(members)
        smoothed = [statistics.fmean(curve[max(0, i - SMOOTHING + 1):i + 1]) for i in range(len(curve))]
        axes.plot(range(1, len(curve) + 1), smoothed, label=f"{arm} ({len(members)} seeds)")
    axes.set_xlabel("RL step")
    axes.set_ylabel(f"on-policy reward ({SMOOTHING}-step mean, seed mean)")
    axes.legend()
    figure.tight_layout()
    figure.savefig(png_path, dpi=100)
    plt.close(figure)
    return True
