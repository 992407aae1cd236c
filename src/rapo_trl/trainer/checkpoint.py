"""RAPO's part of a checkpoint: the rollout engine's RNG and a description of the store it drew from."""

from __future__ import annotations

import json
import logging
import os
from contextlib import suppress

RAPO_STATE_FILE = "rapo_state_{process}.json"

logger = logging.getLogger("rapo_trl.trainer")


def save_rapo_state(folder: str, process_index: int, engine, store) -> str:
    """Write ``rapo_state_{process}.json`` atomically (a temp file in the same folder, then ``os.replace``)."""
    state = {"engine": engine.get_state(), "store": None}
    describe = getattr(store, "describe", None)
    if describe is not None:
        try:
            state["store"] = describe()
        except Exception as error:  # noqa: BLE001 - a store that cannot say must not fail the checkpoint
            state["store"] = {"error": f"{type(error).__name__}: {error}"}
    os.makedirs(folder, exist_ok=True)
    name = RAPO_STATE_FILE.format(process=process_index)
    temp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")  # same folder: os.replace stays atomic
    try:
        with open(temp, "w") as handle:
            json.dump(state, handle, default=str)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, os.path.join(folder, name))
    except BaseException:
        with suppress(OSError):
            os.unlink(temp)
        raise
    return os.path.join(folder, name)


def load_rapo_state(checkpoint: str, process_index: int, engine) -> str | None:
    """Restore the engine's RNG from a checkpoint; None on success, else what is wrong with the file."""
    name = RAPO_STATE_FILE.format(process=process_index)
    try:
        with open(os.path.join(checkpoint, name)) as handle:
            engine_state = json.load(handle)["engine"]
        engine.set_state(engine_state)
    except FileNotFoundError:
        return f"has no {name} (RAPO's rollout state)"
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f"has an unreadable {name} ({type(error).__name__}: {error})"
    return None


def resume_rapo_state(checkpoint: str, process_index: int, engine) -> None:
    """``load_rapo_state``; a missing or unreadable file is said, and training goes on (as TRL does for its RNG)."""
    problem = load_rapo_state(checkpoint, process_index, engine)
    if problem is not None:
        logger.warning("RAPO: checkpoint %s %s; resuming with the retrieval RNG at its initial seed, so which rollouts "
                       "retrieve and what they draw will differ from the interrupted run.", checkpoint, problem)
