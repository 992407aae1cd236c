"""RAPO's part of a checkpoint: the rollout engine's RNG, a description of the store it drew from, and the run's id
(which tags the records it grows into the store, ``growth_rollback.py``)."""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from contextlib import contextmanager, suppress

from rapo_trl.saved_checkpoints import (
    EARLIER_RUN_PREFIX,
    RAPO_STATE_FILE,
    RUN_RECORD,
    checkpoint_saved_last,
    is_complete_checkpoint,
    numbered_checkpoints,
    recorded_run_id,
    saved_run_id,
    saved_state,
)

logger = logging.getLogger("rapo_trl.trainer")

def save_rapo_state(folder: str, process_index: int, engine, store, run: str | None = None,
                    arguments: dict | None = None, run_id: str | None = None, num_processes: int = 1,
                    save_on_each_node: bool = False) -> str:
    """Write ``rapo_state_{process}.json`` atomically (a temp file in the same folder, then ``os.replace``);
    ``arguments``: the run's arguments a resume compares (``changed_arguments.py``); ``run_id``: the ``rapo train``
    run's (its record's), which says whose checkpoint it is in a folder two runs wrote, and ``saved_at``: when, which
    says which of one run's checkpoints was saved last (``checkpoint_to_resume``); ``num_processes`` and
    ``save_on_each_node``: whose states a whole checkpoint holds (``is_complete_checkpoint``)."""
    state = {"engine": engine.get_state(), "store": None, "run": run, "arguments": arguments, "run_id": run_id,
             "saved_at": time.time(), "num_processes": num_processes, "save_on_each_node": save_on_each_node}
    describe = getattr(store, "describe", None)
    if describe is not None:
        try:
            state["store"] = describe()
        except Exception as error:  # noqa: BLE001 - a store that cannot say must not fail the checkpoint
            state["store"] = {"error": f"{type(error).__name__}: {error}"}

    def write(temp: str) -> None:
        with open(temp, "w") as handle:
            json.dump(state, handle, default=str)
            handle.flush()
            os.fsync(handle.fileno())

    return write_atomically(folder, RAPO_STATE_FILE.format(process=process_index), write)


def write_atomically(folder: str, name: str, write: Callable[[str], None]) -> str:
    """``write(temp)`` into a temp file in ``folder``, then ``os.replace`` it to ``name``: a checkpoint killed while
    saving holds the whole file or none. Returns the file's path."""
    os.makedirs(folder, exist_ok=True)
    temp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")  # same folder: os.replace stays atomic
    try:
        write(temp)
        os.replace(temp, os.path.join(folder, name))
    except BaseException:
        with suppress(OSError):
            os.unlink(temp)
        raise
    return os.path.join(folder, name)


def saved_run(checkpoint: str, process_index: int) -> str | None:
    """The run id a checkpoint's RAPO state records (``None``: none, or no readable state)."""
    run = saved_state(checkpoint, process_index).get("run")
    return run if isinstance(run, str) else None


def saved_arguments(checkpoint: str, process_index: int) -> dict | None:
    """The run arguments a checkpoint's RAPO state records (``None``: an older checkpoint, or no readable state)."""
    arguments = saved_state(checkpoint, process_index).get("arguments")
    return arguments if isinstance(arguments, dict) else None


def runs_to_take_back(checkpoint: str, process_index: int, num_processes: int, growing: bool) -> list[str]:
    """The runs whose growth after ``checkpoint`` this process takes back on resume: its own saved run, and on
    process 0 also those of the checkpoint's processes the resumed run does not have (a run saved by two processes,
    resumed on one: its second process's records would otherwise stay, and be retrieved at steps the interrupted run
    could not). A run counts where it grew the store (its saved arguments) or the resumed run grows it."""
    indexes = [process_index]
    if process_index == 0:
        prefix, suffix = RAPO_STATE_FILE.split("{process}")
        with suppress(OSError):
            for name in os.listdir(checkpoint):
                saved = name.removeprefix(prefix).removesuffix(suffix)
                if name.startswith(prefix) and name.endswith(suffix) and saved.isdigit() \
                        and int(saved) >= num_processes:
                    indexes.append(int(saved))
    runs = []
    for index in sorted(set(indexes)):
        state = saved_state(checkpoint, index)  # read once: its run and the arguments saying whether it grew
        run, arguments = state.get("run"), state.get("arguments")
        grew = isinstance(arguments, dict) and arguments.get("store_growth_min_reward") is not None
        if isinstance(run, str) and (grew or growing) and run not in runs:
            runs.append(run)
    return runs


STORE_IDENTITY = ("location", "collection", "embedder", "records")
"""What a checkpoint's store description and the resumed run's store are compared on (after the steps past the
checkpoint have taken their growth back, an unchanged store holds the checkpoint's records)."""


def warn_if_resumed_on_another_store(checkpoint: str, process_index: int, store) -> None:
    """Warn when the store a resumed run retrieves from is not the one the checkpoint's run did: another folder or
    server, collection or embedder, or another record count. Retrieval then draws other steps, so the resumed run is
    not the interrupted one continued (another store may be what is wanted: it is said, not refused)."""
    saved = saved_state(checkpoint, process_index).get("store")
    describe = getattr(store, "describe", None)
    if not isinstance(saved, dict) or "error" in saved or describe is None:
        return
    try:
        now = describe()
    except Exception:  # noqa: BLE001 - a store that cannot say is the outage handling's to report
        return
    changed = [f"{key} {saved[key]!r} -> {now[key]!r}" for key in STORE_IDENTITY
               if key in saved and key in now and saved[key] != now[key]]
    if changed:
        logger.warning("RAPO: resuming from %s with another trace store than its run retrieved from (%s): retrieval "
                       "will draw other steps, so the resumed run is not the interrupted one continued.", checkpoint,
                       "; ".join(changed))


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


class CheckpointSaveError(OSError):
    """A checkpoint could not be written whole (e.g. the disk filled); the half-written folder was removed."""


def last_complete_checkpoint(run_dir: str, resuming: bool = True) -> str | None:
    """The newest whole checkpoint in ``run_dir``; newer half-written ones (a save killed or out of space) are
    skipped, where Trainer's ``resume_from_checkpoint=True`` would take the newest folder, and named in a warning when
    ``resuming`` from the one returned."""
    skipped = []
    for _, folder in reversed(numbered_checkpoints(run_dir)):
        if is_complete_checkpoint(folder):
            if skipped and resuming:
                logger.warning("RAPO: skipping half-written checkpoint(s) %s (no readable trainer_state.json, or not "
                               "every process's RAPO state: the save was interrupted); resuming from %s.",
                               ", ".join(skipped), folder)
            return folder
        skipped.append(folder)
    return None


def checkpoint_to_resume(run_dir: str) -> str | None:
    """The whole checkpoint a bare resume takes: the one saved last by the run ``run_dir``'s record names
    (``checkpoint_saved_last``), with a warning naming the higher-numbered one that by number alone would have been
    taken (an earlier run's, or one of an abandoned branch). Refused, naming both runs, where only another run's
    checkpoints are there: the recorded run started over and stopped before its first checkpoint."""
    newest = last_complete_checkpoint(run_dir, resuming=False)
    saved_last = checkpoint_saved_last(run_dir)
    if saved_last is None and newest is not None:
        other = saved_run_id(newest)
        raise ValueError(
            f"{run_dir}'s record ({RUN_RECORD}) is of run {recorded_run_id(run_dir)}, which saved no checkpoint there; "
            f"its checkpoints are of {f'run {other}' if other else 'an earlier run'} (newest: {newest}). To go "
            f"on with that run, resume from its checkpoint by name ({newest}); to train from the start again, resume "
            "from none (--resume_from_checkpoint false), which moves them into a folder earlier-run-<time> there.")
    if saved_last == newest:
        return last_complete_checkpoint(run_dir)  # names the half-written ones it skips
    logger.warning("RAPO: resuming from %s, the checkpoint saved last by the run %s records; %s has a higher step but "
                   "is another run's, or was saved before it (the run resumed from an earlier checkpoint since). To "
                   "go on from that one instead, resume from it by name (%s).", saved_last, run_dir,
                   os.path.basename(newest), newest)
    return saved_last


def continues_checkpoints_of(resume, run_dir: str) -> bool:
    """Whether a run resuming from ``resume`` continues the checkpoints in ``run_dir``: it resumes one of them.
    Trained from the start, or resumed from a checkpoint elsewhere (one set aside in ``earlier-run-<time>``, another
    output_dir's), its saves would land among another run's."""
    return isinstance(resume, (str, os.PathLike)) and os.path.realpath(os.path.dirname(os.path.abspath(resume))) \
        == os.path.realpath(run_dir)


def set_aside_checkpoints(run_dir: str, resumed_from: str | None = None) -> str | None:
    """Move every ``checkpoint-N`` folder in ``run_dir`` into a new ``earlier-run-<time>`` folder beside them, for a
    run that does not continue them there: one trained from the start, or resumed from ``resumed_from``, a checkpoint
    elsewhere (`continues_checkpoints_of`). Left in place, Trainer's ``save_total_limit`` counts an earlier run's
    checkpoints with the new run's and deletes some of either (it orders them by mtime, or by step where it doubts
    the mtimes), and an earlier run's higher-numbered checkpoint outranks the new run's for a bare resume by step.
    Moved, not deleted: nothing of the earlier run is lost. Returns the folder (``None``: nothing to move)."""
    checkpoints = numbered_checkpoints(run_dir)
    if not checkpoints:
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    aside = os.path.join(run_dir, f"{EARLIER_RUN_PREFIX}{stamp}")
    suffix = 1
    while os.path.exists(aside):
        suffix += 1
        aside = os.path.join(run_dir, f"{EARLIER_RUN_PREFIX}{stamp}-{suffix}")
    os.makedirs(aside)
    for _, folder in checkpoints:
        os.replace(folder, os.path.join(aside, os.path.basename(folder)))
    how = "from the start" if resumed_from is None else f"on from {resumed_from}"
    logger.warning("RAPO: training %s %s: the earlier run's %d checkpoint(s) there moved to %s (to go on from one of "
                   "them instead, pass its folder as resume_from_checkpoint).", run_dir, how, len(checkpoints), aside)
    return aside


def resume_advice(checkpoint: str | None) -> str:
    """How to continue from ``checkpoint``, as a command line and in Python: words that work as written."""
    if checkpoint is None:
        return "run again from the start"
    return (f"run the same command again with `--resume_from_checkpoint {checkpoint}` (or the bare flag: the newest "
            f"whole checkpoint), or in Python trainer.train(resume_from_checkpoint={str(checkpoint)!r})")


def checked_resume(resume_from_checkpoint, run_dir: str):
    """``resume_from_checkpoint`` as Trainer should take it: ``True`` becomes the whole checkpoint the folder's last
    run saved last (``checkpoint_to_resume``), and a named checkpoint that is not a folder or not whole is refused
    before anything loads or moves."""
    if resume_from_checkpoint is True:
        found = checkpoint_to_resume(run_dir)
        if found is None:
            raise ValueError(f"resume_from_checkpoint=True, but {run_dir} holds no whole checkpoint to resume from.")
        return found
    if isinstance(resume_from_checkpoint, (str, os.PathLike)) and not os.path.isdir(resume_from_checkpoint):
        # Refused here, not by Trainer: a run resumed from outside output_dir first moves output_dir's checkpoints
        # aside, which a mistyped path should not cause.
        raise ValueError(f"resume_from_checkpoint={str(resume_from_checkpoint)!r} is not a folder: there is no "
                         "checkpoint to resume from there.")
    if isinstance(resume_from_checkpoint, (str, os.PathLike)) and not is_complete_checkpoint(str(resume_from_checkpoint)):
        earlier = last_complete_checkpoint(run_dir, resuming=False)  # named, not resumed from: no "resuming" line
        raise ValueError(f"{resume_from_checkpoint} is not a whole checkpoint (no readable trainer_state.json, or "
                         f"not every process's RAPO state: its save was interrupted). Resume from an earlier one: "
                         f"{earlier}.")
    return resume_from_checkpoint


def _size(path: str) -> int:
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names)


def _out_of_space(error: BaseException) -> bool:
    while error is not None:
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if "No space left" in str(error) or "file write failed" in str(error):
            return True
        error = error.__cause__ or error.__context__
    return False


def remove_earlier_checkpoint(run_dir: str, step: int) -> None:
    """Before ``checkpoint-{step}`` is saved, remove a folder of that name left by an earlier run (a run started over
    in the same output_dir, or resumed from an earlier checkpoint): Trainer writes into it file by file, so a save
    killed before its ``trainer_state.json`` would leave this run's weights under the earlier run's readable one, a
    folder that passes as whole, and files this save does not write (another process's RAPO state) would stay."""
    folder = os.path.join(run_dir, f"checkpoint-{step}")
    if os.path.isdir(folder):
        logger.info("RAPO: replacing %s, left by an earlier run, with this run's checkpoint.", folder)
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def whole_checkpoint_or_none(run_dir: str, step: int):
    """Around a checkpoint save: if it fails, remove the half-written ``checkpoint-{step}`` (resuming must never take
    it), and for a full disk raise :class:`CheckpointSaveError` naming the folder, the space it needs and the last
    whole checkpoint. Earlier checkpoints are not touched (Trainer rotates them only after a save succeeds)."""
    folder = os.path.join(run_dir, f"checkpoint-{step}")
    try:
        yield
    except Exception as error:
        written = _size(folder) if os.path.isdir(folder) else 0
        shutil.rmtree(folder, ignore_errors=True)
        previous = last_complete_checkpoint(run_dir, resuming=False)
        needed = max(written, _size(previous) if previous else 0)
        free = shutil.disk_usage(run_dir).free
        # torch's errors on a full disk vary ("file write failed", "unexpected pos", an iostream error): less room
        # than a checkpoint takes is what says the disk is full.
        if not (_out_of_space(error) or free < needed):
            raise
        raise CheckpointSaveError(
            errno.ENOSPC,
            f"No space left to save the checkpoint {folder}: it needs about {needed / 2**20:.1f} MiB (the size of the "
            f"last whole one), and {free / 2**20:.1f} MiB are free there. The half-written folder was removed; the "
            f"last whole checkpoint is {previous or 'none'}. Free space (or set output_dir / save_total_limit), then "
            f"{resume_advice(previous)}.",
        ) from error
