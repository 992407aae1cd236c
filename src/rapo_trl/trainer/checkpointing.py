"""RAPOTrainer's checkpoint and fault handling, as a mixin before GRPOTrainer: RAPO's rollout state saved beside
TRL's RNG state and restored on resume; a save that fails leaves no half-written folder; a resume takes only a whole
checkpoint; a trace store that stays unreachable warns at every log or stops the run (``store_outage.py``)."""

from __future__ import annotations

from rapo_trl.trainer.checkpoint import (
    checked_resume,
    resume_rapo_state,
    save_rapo_state,
    whole_checkpoint_or_none,
)
from rapo_trl.trainer.store_outage import StoreOutageCallback


class CheckpointingMixin:
    """Overrides Trainer's ``train``, ``_save_checkpoint``, ``_save_rng_state`` and ``_load_optimizer_and_scheduler``
    (checked by ``rapo_trl.internals``); needs ``rollout_engine`` and ``trace_store`` on the trainer."""

    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        if getattr(self, "_store_outage", None) is None:
            self._store_outage = StoreOutageCallback(self.rollout_engine.store_outage, self.args.store_outage_max_steps)
            self.add_callback(self._store_outage)
        result = super().train(checked_resume(resume_from_checkpoint, self.args.output_dir), *args, **kwargs)
        self._store_outage.check_stop(self.args.output_dir)
        return result

    def _save_checkpoint(self, model, trial):
        # A save that fails (a full disk) leaves no half-written folder for a resume to take.
        with whole_checkpoint_or_none(self._get_output_dir(trial=trial), self.state.global_step):
            super()._save_checkpoint(model, trial)

    def _save_rng_state(self, output_dir):
        # Beside TRL's RNG state, inside Trainer._save_checkpoint: before trainer_state.json, the hub push and
        # checkpoint rotation, so none of them sees a checkpoint without it. Each process saves its own.
        super()._save_rng_state(output_dir)
        save_rapo_state(output_dir, self.accelerator.process_index, self.rollout_engine, self.trace_store)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        resume_rapo_state(checkpoint, self.accelerator.process_index, self.rollout_engine)
