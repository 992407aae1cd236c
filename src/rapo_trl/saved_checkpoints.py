"""Which of a run folder's ``checkpoint-N`` folders are whole, and which was saved last: the one choice a bare resume
(``trainer/resilience/checkpoint.py``) and ``rapo plot`` (``plots.py``) both make. The standard library only, so that
``rapo plot`` reads a folder without loading torch, transformers or TRL."""

from __future__ import annotations

import json
import os
from contextlib import suppress

RAPO_STATE_FILE = "rapo_state_{process}.json"
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


def is_complete_checkpoint(folder: str) -> bool:
    """Whether ``folder`` is a whole checkpoint: Trainer writes ``trainer_state.json`` after everything else (the
    weights, optimizer, RNG and RAPO state), so a readable one means the save finished."""
    try:
        with open(os.path.join(folder, "trainer_state.json")) as handle:
            json.load(handle)
    except (OSError, ValueError):
        return False
    return True


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


def highest_whole_checkpoint(run_dir: str) -> str | None:
    """The highest-numbered whole checkpoint in ``run_dir`` (``None``: none)."""
    whole = [folder for _, folder in numbered_checkpoints(run_dir) if is_complete_checkpoint(folder)]
    return whole[-1] if whole else None


def checkpoint_saved_last(run_dir: str) -> str | None:
    """The whole checkpoint saved last in ``run_dir``: the highest-numbered whole one, unless one was saved after it
    (a lower step: a run saves its steps in order, so the higher one is another, earlier run's, left by a run resumed
    from an earlier checkpoint or started over there). Checkpoints that record no ``saved_at`` (another trainer's)
    go by their step. ``None``: no whole checkpoint."""
    highest = highest_whole_checkpoint(run_dir)
    since = _saved_at(highest) if highest is not None else None
    if since is None:
        return highest
    later = [(saved_at, folder) for _, folder in numbered_checkpoints(run_dir)
             if is_complete_checkpoint(folder) and (saved_at := _saved_at(folder)) is not None and saved_at > since]
    return max(later)[1] if later else highest
