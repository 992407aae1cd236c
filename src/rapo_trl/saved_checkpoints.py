"""Which of a run folder's ``checkpoint-N`` folders are whole, and which was saved last: the one choice a bare resume
(``trainer/resilience/checkpoint.py``) and ``rapo plot`` (``plots.py``) both make. The standard library only, so that
``rapo plot`` reads a folder without loading torch, transformers or TRL."""

from __future__ import annotations

import json
import os
from contextlib import suppress

RAPO_STATE_FILE = "rapo_state_{process}.json"
RUN_RECORD = "rapo_run.json"
"""The file in ``output_dir`` that records the ``rapo train`` run's tools, tool protocol and environment
(``rapo_trl.cli.run_record``); its ``run_id`` names the run whose checkpoints a bare resume takes there."""
EARLIER_RUN_PREFIX = "earlier-run-"
"""The folders in ``output_dir`` that a run trained from the start moves an earlier run's checkpoints into."""


def saved_state(checkpoint: str, process_index: int) -> dict:
    """A checkpoint's RAPO state as saved (``{}``: none, or unreadable)."""
    try:
        with open(os.path.join(checkpoint, RAPO_STATE_FILE.format(process=process_index))) as handle:
            state = json.load(handle)
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def processes_saving_into(checkpoint: str) -> int:
    """How many processes' RAPO state a whole ``checkpoint`` holds, as its process 0 recorded: every process of its
    run. 1 where it cannot say: one saved before the count was recorded, by another trainer or without RNG state
    (``save_only_model``), or with ``save_on_each_node``, where a node's folder may hold only its own processes'."""
    state = saved_state(checkpoint, 0)
    count = state.get("num_processes")
    if state.get("save_on_each_node") or not isinstance(count, int) or isinstance(count, bool) or count < 1:
        return 1
    return count


def is_complete_checkpoint(folder: str) -> bool:
    """Whether ``folder`` is a whole checkpoint: Trainer writes ``trainer_state.json`` after everything else of
    process 0's (the weights, optimizer, RNG and RAPO state), so a readable one means process 0's save finished. It
    does not wait for the other processes: each writes its RAPO state last (atomically), so where process 0's state
    counts several processes, each one's state file says its save finished too."""
    try:
        with open(os.path.join(folder, "trainer_state.json")) as handle:
            json.load(handle)
    except (OSError, ValueError):
        return False
    return all(os.path.isfile(os.path.join(folder, RAPO_STATE_FILE.format(process=index)))
               for index in range(1, processes_saving_into(folder)))


def numbered_checkpoints(run_dir: str) -> list[tuple[int, str]]:
    """``(step, path)`` of every ``checkpoint-N`` folder in ``run_dir``, whole or not, by step."""
    found = []
    with suppress(OSError):
        for name in os.listdir(run_dir):
            step = name.removeprefix("checkpoint-")
            if step.isdigit() and os.path.isdir(os.path.join(run_dir, name)):
                found.append((int(step), os.path.join(run_dir, name)))
    return sorted(found)


def _saved_at(checkpoint: str) -> float | None:
    """When a checkpoint's RAPO state was written (``None``: an older checkpoint, another trainer's, or no readable
    state)."""
    saved_at = saved_state(checkpoint, 0).get("saved_at")
    return float(saved_at) if isinstance(saved_at, (int, float)) and not isinstance(saved_at, bool) else None


def saved_run_id(checkpoint: str) -> str | None:
    """The ``rapo train`` run a checkpoint was saved by (``None``: one saved from Python, by an older version, or with
    no readable state)."""
    run_id = saved_state(checkpoint, 0).get("run_id")
    return run_id if isinstance(run_id, str) else None


def recorded_run(run_dir: str) -> dict:
    """``run_dir``'s run record (``{}``: none, or one that cannot be read)."""
    try:
        with open(os.path.join(run_dir, RUN_RECORD)) as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def recorded_run_id(run_dir: str) -> str | None:
    """The run ``run_dir``'s record names (``None``: no record, or one of a version that named none)."""
    run_id = recorded_run(run_dir).get("run_id")
    return run_id if isinstance(run_id, str) else None


def whole_checkpoints(run_dir: str) -> list[str]:
    """Every whole checkpoint in ``run_dir``, by step."""
    return [folder for _, folder in numbered_checkpoints(run_dir) if is_complete_checkpoint(folder)]


def recorded_runs_checkpoints(run_dir: str) -> list[str]:
    """The whole checkpoints, by step, of the run ``run_dir``'s record names, where another run's lie beside them (a
    run started over there that stopped before it moved the earlier run's aside, or one resumed from a checkpoint
    elsewhere): by step or by when they were saved (clocks differ between machines) either run's may come last, and
    only the record says which run the folder is of. Otherwise every whole one: checkpoints that name no run (saved
    from Python, or by an older version) may be the recorded run's."""
    whole = whole_checkpoints(run_dir)
    recorded = recorded_run_id(run_dir)
    runs = {folder: saved_run_id(folder) for folder in whole}
    if recorded is None or all(run in (None, recorded) for run in runs.values()):
        return whole
    return [folder for folder in whole if runs[folder] == recorded]


def highest_whole_checkpoint(run_dir: str) -> str | None:
    """The highest-numbered whole checkpoint in ``run_dir`` (``None``: none)."""
    whole = whole_checkpoints(run_dir)
    return whole[-1] if whole else None


def checkpoint_saved_last(run_dir: str) -> str | None:
    """The checkpoint saved last by the run ``run_dir``'s record names (`recorded_runs_checkpoints`): its
    highest-numbered whole one, unless one was saved after it (a lower step: a run saves its steps in order, so the
    higher one is of an abandoned branch, left by a run resumed from an earlier checkpoint, or of an earlier run that
    named no run). Checkpoints that record no ``saved_at`` (another trainer's) go by their step. ``None``: no whole
    checkpoint of that run."""
    candidates = recorded_runs_checkpoints(run_dir)
    if not candidates:
        return None
    highest = candidates[-1]
    since = _saved_at(highest)
    if since is None:
        return highest
    later = [(saved_at, folder) for folder in candidates if (saved_at := _saved_at(folder)) is not None
             and saved_at > since]
    return max(later)[1] if later else highest
