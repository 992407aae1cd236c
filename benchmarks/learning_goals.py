"""The issue's goals, read from the screen's picks over all their paired seeds (stages 2 and 3).

Written before stages 2 and 3 ran (``learning_comparison_notes.md``), so the last stage's reading is the rule's:

- The warm-start pick (the screen's best ``rapo_*`` arm) against GRPO of the same seeds: **met** when at least
  ``GOAL_SEEDS`` seeds pair, the mean difference of fresh mean@4 is at least ``MIN_GAIN`` and its per-question
  interval (a bootstrap over questions, a question's seeds resampled together) lies above 0.
- The SFT pick (the best ``sft_then_rapo_*``) against SFT-then-GRPO: **ahead** when that interval lies above 0,
  **non-inferior** when its lower bound is above ``-NON_INFERIORITY_MARGIN``; beside it, the difference on the
  questions SFT-then-GRPO fails. Which questions those are is read, for each seed, from SFT-then-GRPO's other seeds
  (pass rate below ``FAILS_BELOW``), never from the seed being compared: selecting on the reference's own zeros would
  hand the pick a gain by regression to the mean.

The scores are the widest rescored set (``bench_comparison.py --rescore``) on which the pick and its reference both
have every seed they pair on over the runs' own questions; else those 64 questions. The interval over seeds
(Student's t) is shown beside; the verdict reads the per-question one, as the issue asks, except on a version with
``FIXED_PICKS``: that line's rule, written before its runs, decides on the interval over seeds (paired by seed) and
reports the per-question one beside.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from common import mean_interval
from learning_stages import first_warm_start, interval_cell, reference_of, screen, warm_start_of
from paired_questions import FRESH, cluster_bootstrap, interval_text, paired_text, per_question_difference

GOAL_SEEDS = 5
MIN_GAIN = 0.05
NON_INFERIORITY_MARGIN = 0.03
FAILS_BELOW = 0.5
GOALS = (("rapo_guided", "grpo"), ("sft_then_grpo", "sft_then_grpo"))
"""(the screen's group, named by its reference; the reference of its goal)."""
GOAL_REFERENCE = dict(GOALS)
"""The screen's group -> the reference of its goal."""
FIXED_PICKS = {"5e8abc58dc8cf3a71f9809e0b68ab50e6044bb95": ("rapo_prefix_imitate_failed",
                                                            "sft_then_rapo_guided_token_failed")}
"""Commit -> the arms picked before any run at it: a line of the protocol that runs no screen (the ``fp32`` line of
``learning_queue.py``), whose goals read these arms whatever their seed 0 scored."""


def fixed_picks(records: Sequence[dict]) -> tuple[str, ...]:
    """The picks fixed before one code version's runs (``FIXED_PICKS`` of their commits), or none."""
    commits = {r.get("commit") for r in records}
    return next((picks for commit, picks in FIXED_PICKS.items() if commit in commits), ())


def goals(records: Sequence[dict], rescored: Sequence[dict] = ()) -> list[dict]:
    """One dict per pick of the screen: arm, reference, seeds (paired), scored_on, per_seed (differences),
    per_question (question -> differences), interval (their bootstrap: mean, low, high), on_failed (the same on the
    questions the reference fails elsewhere; SFT group only) and verdict."""
    picks = fixed_picks(records)
    chosen = {reference_of(arm): arm for arm in picks} if picks else screen(first_warm_start(records))[1]
    results = []
    for group, reference in GOALS:
        arm = chosen.get(group)
        if arm is None:
            continue
        members, references, scored_on = _scores(records, rescored, arm, reference)
        seeds = _paired_seeds(members, references)
        by_seed = {r["seed"]: r["eval"][FRESH]["mean@k"] for r in references}
        per_seed = [m["eval"][FRESH]["mean@k"] - by_seed[m["seed"]] for m in members if m["seed"] in seeds]
        per_question = per_question_difference(members, references)
        interval = cluster_bootstrap(per_question) if per_question else None
        on_failed = (per_question_difference(members, references, _failed_elsewhere(references))
                     if reference == "sft_then_grpo" else None)
        decided_on = _seed_interval(per_seed) if picks else interval
        results.append({"arm": arm, "reference": reference, "seeds": sorted(seeds), "scored_on": scored_on,
                        "per_seed": per_seed, "per_question": per_question, "interval": interval,
                        "on_failed": on_failed, "verdict": _verdict(reference, len(seeds), decided_on)})
    return results


def _scores(records: Sequence[dict], rescored: Sequence[dict], arm: str, reference: str
            ) -> tuple[list[dict], list[dict], str]:
    own = _pairs(records, arm, reference)
    seeds = _paired_seeds(*own)
    for size in sorted({r["questions"] for r in rescored}, reverse=True):
        wide = _pairs([r for r in rescored if r["questions"] == size], arm, reference)
        if seeds and seeds <= _paired_seeds(*wide):
            return *wide, f"{size} fresh questions, rescored"
    questions = len(own[0][0]["eval"][FRESH].get("question_ids", [])) if own[0] else 0
    return *own, f"the runs' own {questions} fresh questions"


def _pairs(records: Sequence[dict], arm: str, reference: str) -> tuple[list[dict], list[dict]]:
    """``arm``'s and ``reference``'s records, one pair a seed, both runs from one warm start (``warm_start_of``).
    A seed that pairs more than once (run again on the same code with other flags, or on another warm start) counts
    the pair finished first, in record order among equals: counting it twice would narrow the interval over seeds."""
    members = [r for r in records if r["arm"] == arm]
    references = [r for r in records if r["arm"] == reference]
    first: dict[int, tuple[str, dict, dict]] = {}
    for member in members:
        for candidate in references:
            if candidate["seed"] != member["seed"] or warm_start_of(candidate) != warm_start_of(member):
                continue
            finished = max(member.get("recorded", ""), candidate.get("recorded", ""))
            if member["seed"] not in first or finished < first[member["seed"]][0]:
                first[member["seed"]] = (finished, member, candidate)
    pairs = [first[seed] for seed in sorted(first)]
    return [member for _, member, _ in pairs], [candidate for _, _, candidate in pairs]


def _paired_seeds(members: Sequence[dict], references: Sequence[dict]) -> set[int]:
    return {m["seed"] for m in members} & {r["seed"] for r in references}


def _failed_elsewhere(references: Sequence[dict]) -> Callable[[int], set[str]]:
    """seed -> the questions whose pass rate over the reference's other seeds is below ``FAILS_BELOW``."""
    rates = {r["seed"]: dict(zip(r["eval"][FRESH]["question_ids"],
                                 (p / r["eval"][FRESH]["k"] for p in r["eval"][FRESH]["sampled_correct_by_question"]),
                                 strict=True))
             for r in references if "sampled_correct_by_question" in r["eval"][FRESH]}

    def failed(seed: int) -> set[str]:
        others = [scores for other, scores in rates.items() if other != seed]
        questions = set.intersection(*(set(scores) for scores in others)) if others else set()
        return {q for q in questions if statistics.fmean(scores[q] for scores in others) < FAILS_BELOW}

    return failed


def _seed_interval(per_seed: Sequence[float]) -> tuple[float, float, float] | None:
    """The paired differences' mean and 95% interval over seeds (Student's t); ``None`` below two seeds."""
    if len(per_seed) < 2:
        return None
    return mean_interval(per_seed)


def _verdict(reference: str, seeds: int, interval: tuple[float, float, float] | None) -> str:
    if seeds < GOAL_SEEDS:
        return f"open: {seeds} of {GOAL_SEEDS} paired seeds"
    if interval is None:
        return "open: no per-question scores"
    mean, low, _ = interval
    if reference == "grpo":
        return "met" if mean >= MIN_GAIN and low > 0 else "not met"
    if low > 0:
        return "ahead"
    return "non-inferior" if low > -NON_INFERIORITY_MARGIN else "not met"


GOAL_TEXT = {"grpo": f"minus GRPO >= {MIN_GAIN}, interval above 0",
             "sft_then_grpo": f"minus SFT-then-GRPO: lower bound > -{NON_INFERIORITY_MARGIN} (non-inferior), > 0 (ahead)"}


def picks_section(picks: Sequence[str]) -> list[str]:
    """In place of the screen's table, for a code version whose picks were fixed before its runs."""
    against = ", ".join(f"`{arm}` against `{GOAL_REFERENCE[reference_of(arm)]}`" for arm in picks)
    return ["### The picks, fixed before this version's runs", "",
            f"No screen: {against}, chosen from an earlier version's records before any run of this one "
            "(`learning_comparison_notes.md`); no arm is dropped on this version's own scores.", ""]


def goal_section(records: Sequence[dict], rescored: Sequence[dict],
                 table: Callable[[list[str], list[list[str]]], list[str]]) -> list[str]:
    """The goals' table for one code version; nothing before the screen has picked an arm."""
    results = goals(records, rescored)
    if not results:
        return []
    rows = []
    for result in results:
        per_question = "-" if result["interval"] is None else interval_text(result["interval"],
                                                                              len(result["per_question"]))
        rows.append([result["arm"], result["reference"], str(len(result["seeds"])), result["scored_on"],
                     interval_cell(result["per_seed"], signed=True), per_question,
                     "-" if result["on_failed"] is None else paired_text(result["on_failed"]),
                     GOAL_TEXT[result["reference"]], result["verdict"]])
    fixed = bool(fixed_picks(records))
    whose, decides = ("fixed picks", "interval over seeds") if fixed else ("screen's picks", "per-question interval")
    lines = [f"### The goals: the {whose} over their paired seeds", "",
             f"The verdict reads the {decides}, as this version's rule was written before its runs.", ""]
    lines += table(["pick", "against", "paired seeds", "scored on", "difference over seeds (95% CI)",
                    "difference per question (95% CI)", f"on questions the reference fails in its other seeds "
                    f"(pass rate < {FAILS_BELOW})", "goal", "verdict"], rows)
    return [*lines, ""]
