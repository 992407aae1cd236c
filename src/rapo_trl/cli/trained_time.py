"""The wall time RL trained, over every session of a resumed run: what the equal-time SFT baseline (``sft_same_time``)
is given. Trainer's ``train_runtime`` is the last session's alone, so a run resumed from a checkpoint gave the baseline
only the time trained since the resume. The seconds trained up to a checkpoint are saved in its trainer_state.json
(``stateful_callbacks``) and read back when a run resumes from it; steps after the last checkpoint, trained again, count
once."""

from __future__ import annotations

import time

from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState


class TrainedSeconds(TrainerCallback, ExportableState):
    """Seconds trained in this session plus those the resumed checkpoint had trained (``seconds()``)."""

    def __init__(self):
        self.earlier = 0.0
        self.started: float | None = None
        self.ended: float | None = None

    def seconds(self) -> float:
        if self.started is None:
            return self.earlier
        return self.earlier + (self.ended or time.perf_counter()) - self.started

    @classmethod
    def of(cls, trainer) -> float:
        """The seconds the callback of ``trainer`` counted (Trainer replaces it with a copy when it restores callback
        states, under ``restore_callback_states_from_checkpoint``)."""
        return next(callback for callback in trainer.callback_handler.callbacks if isinstance(callback, cls)).seconds()

    def state(self) -> dict:
        return {"args": {}, "attributes": {"trained_seconds": self.seconds()}}

    def on_train_begin(self, args, state, control, **kwargs):
        name = type(self).__name__
        saved = (state.stateful_callbacks or {}).get(name)
        if isinstance(saved, list):
            saved = saved[-1] if saved else None
        if state.stateful_callbacks is not None and name not in state.stateful_callbacks:
            # a checkpoint of a run without it: Trainer's save looks its entry up
            state.stateful_callbacks[name] = {"args": {}, "attributes": {"trained_seconds": 0.0}}
        # a fresh run's state holds this callback's own (0 seconds); a resumed one the checkpoint's
        self.earlier = float(((saved or {}).get("attributes") or {}).get("trained_seconds", 0.0)) \
            if state.global_step > 0 else 0.0
        self.started, self.ended = time.perf_counter(), None
        return control

    def on_train_end(self, args, state, control, **kwargs):
        self.ended = time.perf_counter()
        return control
