"""The lever screen's decision rule and the finalists' wider scoring, as the comparison's report prints them.

Stage 1 runs each lever arm once (seed 0) on one code version; the rule, written before its runs
(``learning_comparison_notes.md``), keeps or drops each arm against the warm start and its own reference, and picks
one warm-start arm (``rapo_*``) and one SFT arm (``sft_then_rapo_*``) for more seeds. Stage 3 scores finalists and
their baselines again on more fresh questions (``bench_comparison.py --rescore``); those scores pair per question.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from common import mean_interval
from paired_questions import FRESH

ON_POLICY = "rapo/reward_on_policy"
CREDIT_TO_RETRIEVED = "rapo/positive_advantage_share_retrieved"
SCREEN_SEED = 0
DROP_MARGIN = 0.03
"""An arm more than this below its reference's fresh mean@4 is dropped."""
TIE = 0.01
"""Arms within this of the best fresh mean@4 tie; the tie is broken on training signals."""
PAIRED_STEPS = slice(10, 30)
"""Steps 11-30: where the on-policy training reward of an arm and its reference are compared (the same questions)."""
REFERENCES = {"sft_then_rapo_": "sft_then_grpo", "rapo_": "rapo_guided"}
"""A lever arm's reference by its name's start (the longer start first): SFT-started arms against SFT-then-GRPO,
warm-start arms against plain guided RAPO."""
NOT_LEVERS = ("rapo_guided", "rapo_paper", "rapo_paper_scored_blocks")
"""Arms named like levers that are references or the fidelity check."""


REPRODUCED_ARMS = ("grpo", "sft_then_grpo")
"""The runs a later code version repeats, seed for seed, for its records to count beside an earlier version's."""


def same_code_versions(records: Sequence[dict]) -> dict[str, str]:
    """Later code version -> the earlier one it repeats: its ``REPRODUCED_ARMS`` at the screen's seed logged the same
    per-step rewards and losses, exactly, as the earlier version's (the options the later code added are off in
    them, and one torch thread makes a run repeat). Versions in the order their first record was written."""
    def fingerprint(version: str) -> tuple | None:
        found = {r["arm"]: r for r in records if r.get("code") == version and r.get("seed") == SCREEN_SEED
                 and r["arm"] in REPRODUCED_ARMS}
        if len(found) < len(REPRODUCED_ARMS):
            return None
        return tuple((found[arm]["per_step"].get("reward"), found[arm]["per_step"].get("loss"))
                     for arm in REPRODUCED_ARMS)

    versions = list(dict.fromkeys(r.get("code") for r in records))
    same, earlier = {}, []
    for version in versions:
        mine = fingerprint(version)
        match = next((v for v, theirs in earlier if mine is not None and theirs == mine), None)
        if match is not None:
            same[version] = match
        else:
            earlier.append((version, mine))
    return same


def warm_start_of(record: dict) -> str:
    """The warm start a run trained from: the fingerprint of its weights where the record carries one
    (``learning_queue.py`` adds it to the runs of a warm start rebuilt on another CPU), else the CPU it ran on (each
    line's first warm start was built once on one kind of CPU, and its runs carry no fingerprint)."""
    return record.get("warm_start") or record.get("machine", {}).get("cpu", "")


def by_warm_start(records: Sequence[dict]) -> dict[str, list[dict]]:
    """``warm_start_of`` -> its records, in the order each warm start's first record comes: runs pair, and a lever is
    judged against its reference and the warm start's own score, only within one warm start."""
    groups: dict[str, list[dict]] = {}
    for record in records:
        groups.setdefault(warm_start_of(record), []).append(record)
    return groups


def first_warm_start(records: Sequence[dict]) -> list[dict]:
    """The records of the warm start whose record comes first: the one a code version's screen picked from (a warm
    start rebuilt on another CPU reruns levers beside the picks; its runs change no pick)."""
    groups = by_warm_start(records)
    return next(iter(groups.values())) if groups else []


def joined_versions(records: Sequence[dict]) -> tuple[list[dict], dict[str, list[str]]]:
    """The records with each later code version that repeats an earlier one (``same_code_versions``) counted as the
    earlier, a run the earlier version already has (same arm, seed and warm start: the same numbers) left out; and
    version -> the versions joined into it."""
    same = same_code_versions(records)
    joined: dict[str, list[str]] = {}
    for later, earlier in same.items():
        joined.setdefault(earlier, []).append(later)
    kept, seen = [], set()
    for record in sorted(records, key=lambda r: r.get("code") in same):  # the earlier version's runs first
        code = same.get(record.get("code"), record.get("code"))
        run = (code, record["arm"], record["seed"], warm_start_of(record))
        if run in seen and record.get("code") in same:
            continue
        seen.add(run)
        kept.append({**record, "code": code} if code != record.get("code") else record)
    return kept, joined


def reference_of(arm: str) -> str | None:
    """The reference a lever arm is judged against; ``None`` for an arm that is not a lever."""
    if arm in NOT_LEVERS:
        return None
    return next((reference for start, reference in REFERENCES.items() if arm.startswith(start)), None)


def screen(records: Sequence[dict]) -> tuple[list[dict], dict[str, str]]:
    """Each lever arm's verdict at the screen's seed, and the arm each group sends on (group: its reference), for the
    records of one warm start (``by_warm_start``).

    A verdict is a dict: arm, fresh, reference, line (the reference's fresh minus ``DROP_MARGIN``), verdict. An arm is
    dropped below the warm start or below its line; among the arms kept, a group's best fresh mean@4 goes on, a tie
    (within ``TIE``) broken on the paired on-policy reward over ``PAIRED_STEPS`` against its reference, then on the
    lower share of positive credit given to rows shown a stored step."""
    at_seed = {r["arm"]: r for r in records if r.get("seed") == SCREEN_SEED or r["arm"] == "warm_start"}
    warm = at_seed.get("warm_start")
    verdicts = []
    for arm, record in at_seed.items():
        reference = reference_of(arm)
        if reference is None:
            continue
        fresh, against = _fresh(record), at_seed.get(reference)
        line = None if against is None else _fresh(against) - DROP_MARGIN
        if against is None or warm is None:
            verdict = f"undecided: no {reference if against is None else 'warm start'} record"
        elif fresh < _fresh(warm):
            verdict = "dropped: below the warm start"
        elif fresh < line:
            verdict = f"dropped: more than {DROP_MARGIN} below {reference}"
        else:
            verdict = "kept"
        verdicts.append({"arm": arm, "fresh": fresh, "reference": reference, "line": line, "verdict": verdict,
                         "paired_on_policy": _paired_on_policy(record, against),
                         "credit_to_retrieved": _mean_of(record, CREDIT_TO_RETRIEVED)})
    chosen = {}
    for reference in REFERENCES.values():
        kept = [v for v in verdicts if v["reference"] == reference and v["verdict"] == "kept"]
        if kept:
            chosen[reference] = _best(kept)["arm"]
    return verdicts, chosen


def _best(kept: list[dict]) -> dict:
    top = max(v["fresh"] for v in kept)
    tied = [v for v in kept if v["fresh"] >= top - TIE]
    return max(tied, key=lambda v: (_or(v["paired_on_policy"], float("-inf")), -_or(v["credit_to_retrieved"], 0.0),
                                    v["fresh"]))


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def _fresh(record: dict) -> float:
    return record["eval"][FRESH]["mean@k"]


def on_policy(record: dict) -> list[float]:
    """A run's on-policy training reward per step (the whole batch's reward where a step logged none: GRPO's rows are
    all on-policy)."""
    steps = record["per_step"]
    values = steps.get(ON_POLICY) or []
    return [v if v is not None else r for v, r in zip(values, steps["reward"], strict=False)] or steps["reward"]


def _paired_on_policy(record: dict, reference: dict | None) -> float | None:
    """The arm's mean on-policy reward minus its reference's over ``PAIRED_STEPS``, on the steps both logged."""
    if reference is None:
        return None
    pairs = [(a, b) for a, b in zip(on_policy(record)[PAIRED_STEPS], on_policy(reference)[PAIRED_STEPS],
                                     strict=False) if a is not None and b is not None]
    return statistics.fmean(a - b for a, b in pairs) if pairs else None


def _mean_of(record: dict, name: str) -> float | None:
    values = [v for v in record.get("per_step", {}).get(name, []) if v is not None]
    return statistics.fmean(values) if values else None


def screen_section(records: Sequence[dict], table: Callable[[list[str], list[list[str]]], list[str]],
                   picks: bool = True, heading: str = "###") -> list[str]:
    """The screen's table and choice for the records of one code version and one warm start; nothing when no lever
    arm ran at its seed. Without ``picks`` (a warm start after the version's first) the choice is the rule's reading
    on that warm start, not stage 2's."""
    verdicts, chosen = screen(records)
    if not verdicts:
        return []
    rows = [[v["arm"], f"{v['fresh']:.3f}", v["reference"], cell(v["line"]), cell(v["paired_on_policy"], signed=True),
             cell(v["credit_to_retrieved"]), v["verdict"]] for v in sorted(verdicts, key=lambda v: -v["fresh"])]
    lines = [f"{heading} Stage 1: the decision rule at seed {SCREEN_SEED}", ""]
    lines += table(["arm", f"{FRESH} mean@4", "reference", "drop line", "on-policy reward minus reference, steps "
                    f"{PAIRED_STEPS.start + 1}-{PAIRED_STEPS.stop}", "credit to retrieved rows", "verdict"], rows)
    goes_on = ", ".join(f"`{arm}` (against `{reference}`)" for reference, arm in chosen.items()) or "none yet"
    if picks:
        return [*lines, "", f"Stage 2 takes: {goes_on}.", ""]
    return [*lines, "", f"The rule's best on this warm start: {goes_on}; stage 2's picks are the first warm start's.",
            ""]


def rescored_section(rescored: Sequence[dict], table: Callable[[list[str], list[list[str]]], list[str]],
                     per_question: Callable[[list[dict], list[dict]], str]) -> list[str]:
    """The wider scoring's table for one code version: each arm's runs on the same N fresh questions, paired per
    question with GRPO's and SFT-then-GRPO's of the same seed."""
    by_size: dict[int, dict[str, list[dict]]] = {}
    for record in rescored:
        by_size.setdefault(record["questions"], {}).setdefault(record["arm"], []).append(record)
    lines = []
    for size, by_arm in sorted(by_size.items()):
        rows = []
        for arm, members in by_arm.items():
            members = sorted(members, key=lambda r: r["seed"])
            means = [_fresh(m) for m in members]
            rows.append([arm, " ".join(str(m["seed"]) for m in members), f"{statistics.fmean(means):.3f}",
                         *("-" if arm == reference else per_question(members, by_arm.get(reference, []))
                           for reference in ("grpo", "sft_then_grpo"))])
        lines += [f"### Rescored on {size} fresh questions", ""]
        lines += table(["arm", "seeds", "mean@4 (seed mean)", "minus GRPO, per question",
                        "minus SFT-then-GRPO, per question"], rows)
        lines.append("")
    return lines


def cell(value: float | None, signed: bool = False) -> str:
    """A table cell: three decimals, ``-`` for none."""
    if value is None:
        return "-"
    return f"{value:+.3f}" if signed else f"{value:.3f}"


def interval_cell(values: Sequence[float], signed: bool = False) -> str:
    """A table cell: the mean of a handful of values (seeds) and its 95% interval (Student's t); ``-`` for none."""
    if not values:
        return "-"
    mean, low, high = mean_interval(values)
    if low is None:
        return cell(mean, signed)
    return f"{cell(mean, signed)} ({cell(low, signed)} to {cell(high, signed)})"
