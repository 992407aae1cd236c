"""RAPOTrainer's checkpoint and fault handling, as a mixin before GRPOTrainer: RAPO's rollout state saved beside
TRL's RNG state and restored on resume, and with it the generation a checkpoint falls inside
(``generation_buffer.py``); a save that fails leaves no half-written folder; a resume takes only a whole
checkpoint, walks the epoch it resumes in the uninterrupted run's prompt order (``epoch_order.py``) and takes back
what the steps after the checkpoint grew into the store (``growth_rollback.py``); a SIGTERM stops the run at the end
of its step with a checkpoint (``sigterm_stop.py``); a trace store that stays unreachable warns at every log or stops
the run (``store_outage.py``)."""

from __future__ import annotations

from rapo_trl.trainer.resilience.changed_arguments import run_arguments, warn_if_resumed_with_other_arguments
from rapo_trl.trainer.resilience.checkpoint import (
    checked_resume,
    continues_checkpoints_of,
    remove_earlier_checkpoint,
    resume_rapo_state,
    runs_to_take_back,
    save_rapo_state,
    saved_arguments,
    saved_run,
    set_aside_checkpoints,
    warn_if_resumed_on_another_store,
    whole_checkpoint_or_none,
)
from rapo_trl.trainer.resilience.epoch_order import resumable
from rapo_trl.trainer.resilience.generation_buffer import resume_generation, save_generation
from rapo_trl.trainer.resilience.growth_rollback import take_back_growth
from rapo_trl.trainer.resilience.sigterm_stop import SigtermStop
from rapo_trl.trainer.resilience.store_outage import StoreOutageCallback


class CheckpointingMixin:
    """Overrides Trainer's ``train``, ``_save_checkpoint``, ``_save_rng_state``, ``_load_optimizer_and_scheduler`` and
    GRPOTrainer's ``_get_train_sampler``
    (checked by ``rapo_trl.internals``); needs ``rollout_engine``, ``trace_store``, ``growth_run`` and ``run_id`` on the trainer."""

    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        if getattr(self, "_store_outage", None) is None:
            self._store_outage = StoreOutageCallback(self.rollout_engine.store_outage, self.args.store_outage_max_steps)
            self.add_callback(self._store_outage)
            self._sigterm = SigtermStop(self.accelerator)
            self.add_callback(self._sigterm)
        resume = checked_resume(resume_from_checkpoint, self.args.output_dir)
        if not continues_checkpoints_of(resume, self.args.output_dir):
            self._set_aside_earlier_checkpoints(resume or None)
        self._sigterm.install()
        try:
            result = super().train(resume, *args, **kwargs)
        finally:
            self._sigterm.uninstall()
        self._sigterm.check_stop(self.args.output_dir, finished=self.state.global_step >= self.state.max_steps)
        self._store_outage.check_stop(self.args.output_dir)
        return result

    def _set_aside_earlier_checkpoints(self, resumed_from: str | None) -> None:
        # A run trained from the start, or resumed from a checkpoint outside output_dir, shares output_dir with no
        # earlier run's checkpoints: save_total_limit would delete some of either, and a bare resume by step could
        # take the earlier run's. Also a second train() of this trainer: it starts again at step 0, and its saves
        # would replace the first one's folders step by step. The processes that write checkpoints move them (one a
        # node with save_on_each_node); none saves before.
        if self.args.should_save:
            set_aside_checkpoints(self.args.output_dir, resumed_from)
        self.accelerator.wait_for_everyone()

    def _get_train_sampler(self, dataset=None):
        # A run resumed in a later epoch walks that epoch in the uninterrupted run's prompt order.
        return resumable(super()._get_train_sampler(dataset))

    @property
    def stop_requested(self) -> bool:
        """Whether a SIGTERM has asked this run to stop (at the end of its step, with a checkpoint)."""
        return getattr(self, "_sigterm", None) is not None and self._sigterm.requested

    def _save_checkpoint(self, model, trial):
        run_dir = self._get_output_dir(trial=trial)
        if self.args.should_save:
            remove_earlier_checkpoint(run_dir, self.state.global_step)
        self.accelerator.wait_for_everyone()  # no process writes its files into the folder before it is gone
        # A save that fails (a full disk) leaves no half-written folder for a resume to take.
        with whole_checkpoint_or_none(run_dir, self.state.global_step):
            super()._save_checkpoint(model, trial)

    def _save_rng_state(self, output_dir):
        # Beside TRL's RNG state, inside Trainer._save_checkpoint: before trainer_state.json, the hub push and
        # checkpoint rotation, so none of them sees a checkpoint without it. Each process saves its own, RAPO's state
        # last: process 0 writes trainer_state.json without waiting for the others, so a process's RAPO state is
        # what says its part of the checkpoint is whole (is_complete_checkpoint).
        super()._save_rng_state(output_dir)
        save_generation(self, output_dir)
        save_rapo_state(output_dir, self.accelerator.process_index, self.rollout_engine, self.trace_store,
                        self.growth_run, run_arguments(self), self.run_id, self.accelerator.num_processes,
                        self.args.save_on_each_node)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        resume_rapo_state(checkpoint, self.accelerator.process_index, self.rollout_engine)
        resume_generation(self, checkpoint)
        run = saved_run(checkpoint, self.accelerator.process_index)
        saved = saved_arguments(checkpoint, self.accelerator.process_index)
        if run is not None:
            self.growth_run = run
        # The checkpoint's run may have grown the store even when the resumed one does not (growth turned off); a
        # process the resumed run lacks has its growth taken back by process 0. The state is the checkpoint's here:
        # its global_step is the one resumed.
        for grown_by in runs_to_take_back(checkpoint, self.accelerator.process_index, self.accelerator.num_processes,
                                          growing=self.args.store_growth_min_reward is not None):
            take_back_growth(self.trace_store, grown_by, self.state.global_step)
        if self.accelerator.is_main_process:  # said once; the state's max_steps is the resumed run's here, its step the checkpoint's
            warn_if_resumed_on_another_store(checkpoint, self.accelerator.process_index, self.trace_store)
            warn_if_resumed_with_other_arguments(checkpoint, saved, run_arguments(self), self.state.global_step)
        self.accelerator.wait_for_everyone()  # no process retrieves before every one has taken its growth back
