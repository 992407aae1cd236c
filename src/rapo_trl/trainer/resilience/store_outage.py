"""What a training run does while its trace store is unreachable: says so at every logging step, and with
``store_outage_max_steps`` stops with a checkpoint saved (``rapo_trl.store.outage`` holds the retrieval rule)."""

from __future__ import annotations

import logging

from transformers import TrainerCallback

from rapo_trl.store.errors import TraceStoreError
from rapo_trl.trainer.resilience.checkpoint import resume_advice

logger = logging.getLogger("rapo_trl.trainer")


class StoreUnavailableError(TraceStoreError, RuntimeError):
    """The trace store stayed unreachable for ``store_outage_max_steps`` training steps."""


class StoreOutageCallback(TrainerCallback):
    """Counts the steps that end with the store down; warns at each log while it is; asks for a checkpoint and a
    stop once ``max_steps`` is reached (``check_stop`` then raises, after the trainer has saved)."""

    def __init__(self, outage, max_steps: int | None):
        self.outage = outage
        self.max_steps = max_steps
        self.stopped_at: int | None = None

    def on_step_end(self, args, state, control, **kwargs):
        down = self.outage.step_ended()
        if self.max_steps is not None and down >= self.max_steps:
            control.should_save = True  # the trainer saves this step's checkpoint before it stops
            control.should_training_stop = True
            self.stopped_at = state.global_step

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.outage.down:
            what = (f"the run stops after {self.max_steps} such steps" if self.max_steps is not None else
                    "training goes on as GRPO without retrieval (set store_outage_max_steps to stop instead)")
            logger.warning("RAPO: at step %d %s; %s. Restart the store (the same `chroma run --path DIR --port "
                           "PORT`) and retrieval resumes by itself.", state.global_step, self.outage.describe(), what)

    def check_stop(self, output_dir: str) -> None:
        """Raise :class:`StoreUnavailableError` if this callback stopped the run."""
        if self.stopped_at is None:
            return
        checkpoint = f"{output_dir}/checkpoint-{self.stopped_at}"
        raise StoreUnavailableError(
            f"RAPO stopped at step {self.stopped_at}: {self.outage.describe()}, and store_outage_max_steps="
            f"{self.max_steps}. The checkpoint {checkpoint} is whole: restart the store, then, to continue exactly "
            f"from there, {resume_advice(checkpoint)}."
        )
