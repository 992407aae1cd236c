"""SIGTERM (a scheduler preempting the job, ``kill``, ``docker stop``) ends a run at the end of the step it arrives
in, with that step's checkpoint saved whole, instead of killing it mid-step: the run resumes from exactly there
(``--resume_from_checkpoint``). Only the first SIGTERM is taken so; a second one ends the process at once."""

from __future__ import annotations

import logging
import signal
import threading

import torch
from transformers import TrainerCallback

from rapo_trl.trainer.resilience.checkpoint import resume_advice

logger = logging.getLogger("rapo_trl.trainer")


class TrainingStoppedError(RuntimeError):
    """The run stopped on SIGTERM after saving a whole checkpoint."""

    exit_code = 128 + signal.SIGTERM
    """What ``rapo train`` exits with: a process ended by SIGTERM, as a scheduler expects of a preempted job."""


class SigtermStop(TrainerCallback):
    """While ``installed``: a SIGTERM asks for a save and a stop at the end of the current step (or of the save under
    way); ``check_stop`` then raises :class:`TrainingStoppedError` naming the checkpoint."""

    def __init__(self, accelerator):
        self.accelerator = accelerator
        self.requested = False
        self.stopped_at: int | None = None
        self._previous = None

    def install(self) -> None:
        self.requested, self.stopped_at = False, None
        # Python runs signal handlers in the main thread only, and only it may set them.
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)

    def uninstall(self) -> None:
        if self._previous is not None and signal.getsignal(signal.SIGTERM) == self._handle:
            signal.signal(signal.SIGTERM, self._previous)
        self._previous = None

    def _handle(self, signum, frame) -> None:
        self.requested = True
        # The next SIGTERM is handled as before this run (by default, the end of the process): a stop that hangs can
        # still be ended.
        signal.signal(signal.SIGTERM, self._previous if self._previous is not None else signal.SIG_DFL)
        logger.warning("RAPO: SIGTERM received: finishing this step, saving a checkpoint, then stopping (a second "
                       "SIGTERM stops at once).")

    def _agreed(self) -> bool:
        """Whether any process was asked to stop: every process stops at the same step, or the others would wait in
        the next step's collectives forever."""
        if self.accelerator.num_processes == 1:
            return self.requested
        flag = torch.tensor([float(self.requested)], device=self.accelerator.device)
        return bool(self.accelerator.gather(flag).max() > 0)

    def on_step_end(self, args, state, control, **kwargs):
        if self._agreed():
            control.should_save = True  # the trainer saves this step's checkpoint, then stops
            control.should_training_stop = True
            self.stopped_at = state.global_step

    def on_save(self, args, state, control, **kwargs):
        # A SIGTERM during a save: the checkpoint just finished is the one to resume from.
        if self.stopped_at is None and self._agreed():
            control.should_training_stop = True
            self.stopped_at = state.global_step

    def check_stop(self, output_dir: str, finished: bool = False) -> None:
        """Raise :class:`TrainingStoppedError` if a SIGTERM stopped the run before it ``finished`` its steps."""
        if self.stopped_at is None or finished:
            return
        checkpoint = f"{output_dir}/checkpoint-{self.stopped_at}"
        raise TrainingStoppedError(f"RAPO stopped on SIGTERM after step {self.stopped_at}. The checkpoint {checkpoint} "
                                   f"is whole: to continue exactly from there, {resume_advice(checkpoint)}.")
