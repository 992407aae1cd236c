"""The RL runs' rewards per step beside ``rapo eval``'s scores: RAPO's reward, split into on-policy rows and hybrid rows
that retrieved, the shares of retrieved steps that were a final answer or the row's own question, and the GRPO
baseline's reward, so a report says whether retrieval helped during training and what it handed over."""

from __future__ import annotations

from pathlib import Path

STEP_KEYS = {
    "reward": "reward",
    "rapo/reward_on_policy": "on-policy",
    "rapo/reward_hybrid_retrieved": "hybrid, retrieved",
    "rapo/retrieved_answer_share": "retrieved answer share",
    "rapo/retrieved_own_question_share": "own question share",
}
"""Logged key -> its column title."""


def training_steps(models: dict[str, str]) -> dict[str, list[dict]]:
    """``model -> [{"step": n, key: value, ...}]`` of the ``STEP_KEYS`` each run logged, for the models in
    ``models`` (name -> folder) that hold a ``trainer_state.json``: the RL runs, not the SFT ones."""
    from rapo_trl.plots import STATE_FILE, load_log_history

    steps: dict[str, list[dict]] = {}
    for name, folder in models.items():
        if not (Path(folder) / STATE_FILE).is_file():
            continue
        logged = [entry for entry in load_log_history(folder) if "step" in entry and "reward" in entry]
        steps[name] = [{"step": entry["step"], **{key: entry[key] for key in STEP_KEYS if key in entry}}
                       for entry in logged]
    return steps


def training_table(steps: dict[str, list[dict]]) -> str:
    """``training_steps`` as one markdown table, a row per step and a column per model and logged key; ``""`` when
    no run logged any."""
    columns = [(name, key) for name, entries in steps.items() for key in STEP_KEYS
               if any(key in entry for entry in entries)]
    if not columns:
        return ""
    by_step: dict[int, dict[tuple[str, str], float]] = {}
    for name, entries in steps.items():
        for entry in entries:
            row = by_step.setdefault(entry["step"], {})
            row.update({(name, key): value for key, value in entry.items() if key in STEP_KEYS})
    header = ["step", *(f"{name}: {STEP_KEYS[key]}" for name, key in columns)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for step in sorted(by_step):
        cells = [f"{by_step[step][column]:.3f}" if column in by_step[step] else "-" for column in columns]
        lines.append("| " + " | ".join([str(step), *cells]) + " |")
    return "Training, per step (logged by `rapo train`)\n\n" + "\n".join(lines)
