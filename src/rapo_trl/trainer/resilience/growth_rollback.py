"""A resumed run takes back what its interrupted steps grew into the trace store.

With ``store_growth_min_reward`` set, a step adds its groups' best trajectories before its loss, so a run stopped
after that (in the loss, in the checkpoint save) leaves records of a step its last checkpoint does not hold. Resumed from that
checkpoint, it would retrieve them when it takes the step again, where the uninterrupted run could not: the resumed
run would not be the run it continues. So every grown record is tagged with the run (an id kept in each
checkpoint's RAPO state, one per process) and the step that grew it, and a resume first deletes its run's records
of the steps after the checkpoint (each process its own; process 0 also those of the checkpoint's processes the
resumed run does not have, ``checkpoint.runs_to_take_back``). Records grown by other runs sharing the store are left alone.
"""

from __future__ import annotations

import logging
import uuid

logger = logging.getLogger("rapo_trl.trainer")


def new_run_id() -> str:
    # os.urandom, not the random module: drawing it must not move any RNG a resume restores.
    return uuid.uuid4().hex[:16]


def growth_tag(run: str, step: int) -> dict:
    """The metadata each record grown at training step ``step`` (1-based) of run ``run`` carries."""
    return {"grown_by": run, "grown_at_step": int(step)}


def take_back_growth(store, run: str | None, step: int) -> int:
    """Delete what run ``run`` grew into ``store`` after step ``step``; a store that cannot (no such method, or
    unreachable) is said once and the resume goes on. Returns how many records were deleted."""
    delete = getattr(store, "delete", None)
    if delete is None or run is None:
        return 0
    try:
        removed = delete({"$and": [{"grown_by": run}, {"grown_at_step": {"$gt": int(step)}}]})
    except Exception as error:  # noqa: BLE001 - a resume must not fail on a store it can still train beside
        logger.warning("RAPO: could not delete the trace-store records this run grew after step %d (%s: %s); the "
                       "resumed steps may retrieve them, where the interrupted run could not.", step,
                       type(error).__name__, error)
        return 0
    if removed:
        logger.info("RAPO: deleted %d trace-store record(s) the interrupted run grew after its checkpoint at step %d; "
                    "the steps it takes again grow them again.", removed, step)
    return removed
