"""Retrievals you can see, in bench_learning's records and report: per training step, the reward of hybrid rows shown
a stored step beside the on-policy rows' (the paper's claim that retrieval widens exploration should show there
first), the share of stored steps from the row's own question and the share that are final answers.

The trainer logs them (``rapo/reward_hybrid_retrieved``, ``rapo/reward_on_policy``,
``rapo/retrieved_own_question_share``, ``rapo/retrieved_answer_share``; docs/metrics.md), only at steps where they
are defined; a run's record keeps one list per metric, ``None`` at the steps without it. Records from before these
metrics have no ``retrieval_view`` and add nothing to the report.
"""

from __future__ import annotations

import statistics

from common import markdown_table

METRICS = {
    "reward_hybrid_retrieved": "rapo/reward_hybrid_retrieved",
    "reward_on_policy": "rapo/reward_on_policy",
    "own_question_share": "rapo/retrieved_own_question_share",
    "answer_share": "rapo/retrieved_answer_share",
}
"""Record key -> the trainer's metric."""


def per_step(logs: list[dict]) -> dict:
    """The record's ``retrieval_view``: each metric per logged training step (``logs``: the trainer's log history
    entries of training steps), ``None`` where the step did not log it."""
    return {key: [float(e[name]) if name in e else None for e in logs] for key, name in METRICS.items()}


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def _cell(value: float | None, signed: bool = False) -> str:
    return "-" if value is None else (f"{value:+.3f}" if signed else f"{value:.3f}")


def step_rows(members: list[dict]) -> list[list[str]]:
    """One row per training step: the mean over seeds (of the seeds that logged it) of each metric, and the
    difference hybrid-shown-a-step minus on-policy (mean over the seeds that logged both)."""
    views = [m["retrieval_view"] for m in members]
    length = max(len(v["reward_on_policy"]) for v in views)

    def at(key, step):
        return [v[key][step] if step < len(v[key]) else None for v in views]

    rows = []
    for step in range(length):
        shown, on_policy = at("reward_hybrid_retrieved", step), at("reward_on_policy", step)
        gap = _mean([a - b if a is not None and b is not None else None for a, b in zip(shown, on_policy)])
        rows.append([str(step + 1), _cell(_mean(shown)), _cell(_mean(on_policy)), _cell(gap, signed=True),
                     _cell(_mean(at("own_question_share", step))), _cell(_mean(at("answer_share", step)))])
    return rows


def report_lines(groups: dict) -> list[str]:
    """A per-step table for each group of runs (``(start, arm, steps) -> records``) whose hybrid rows were shown
    stored steps; nothing for groups without them (GRPO) or records from before these metrics."""
    lines = []
    for (start, arm, steps), members in sorted(groups.items()):
        members = [m for m in members if "retrieval_view" in m]
        if not any(v is not None for m in members for v in m["retrieval_view"]["reward_hybrid_retrieved"]):
            continue
        rows = step_rows(members)
        whole = [_mean(_mean(m["retrieval_view"][key]) for m in members) for key in METRICS]
        lines += ["", f"### Retrievals you can see: {start} start, {arm}, {steps} steps ({len(members)} seeds)", "",
                  "Per training step, the mean over seeds: the weighted reward of hybrid rows shown a stored step "
                  "beside the on-policy rows' (hybrid rows shown only the fallback text, or nothing, are neither), "
                  "and of the stored steps shown, the share from the row's own question and the share holding a "
                  "final answer (docs/metrics.md). Whole run: hybrid shown a step "
                  f"{_cell(whole[0])}, on-policy {_cell(whole[1])}, own question {_cell(whole[2])}, final answer "
                  f"{_cell(whole[3])}.", ""]
        lines += markdown_table(["step", "reward: hybrid shown a step", "reward: on-policy", "difference",
                                 "own-question share", "final-answer share"], rows, align="rrrrrr")
    return lines
