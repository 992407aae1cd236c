"""``grpo_same_rollouts``: the GRPO baseline of a ``rapo train`` run, the same recipe with retrieval off, trained from
the same start, seed, questions and rollouts per step, saved with its history and plots in ``GRPO_SAME_ROLLOUTS_DIR``."""

from __future__ import annotations

from pathlib import Path

from rapo_trl.cli.common import GRPO_SAME_ROLLOUTS_DIR
from rapo_trl.cli.console import say
from rapo_trl.cli.run_record import stamp_baseline, unstamp_baseline
from rapo_trl.cli.saved_history import save_history_and_plots
from rapo_trl.cli.trainer_build import PolicySource, TrainingData, build_trainer, with_values

RETRIEVAL_OFF = {"num_hybrid_generations": 0, "retrieve_prob": 0.0}
"""RAPOConfig values that make the trainer GRPO: no row may retrieve."""


def grpo_baseline_folder(rapo_args) -> str:
    return str(Path(rapo_args.output_dir) / GRPO_SAME_ROLLOUTS_DIR)


def grpo_baseline_args(rapo_args, steps: int | None):
    """The baseline's config: the recipe's with retrieval off, for ``steps`` steps (None: the recipe's max_steps, or
    its epochs). The options that act only through retrieved steps go back to their defaults, which changes nothing
    the baseline computes (``RETRIEVAL_ONLY_OPTIONS``) and leaves the trainer no option to warn of as ignored."""
    from rapo_trl.config import retrieval_only_defaults

    max_steps = rapo_args.max_steps if steps is None else steps
    return with_values(rapo_args, output_dir=grpo_baseline_folder(rapo_args), max_steps=max_steps,
                       resume_from_checkpoint=None, **RETRIEVAL_OFF, **retrieval_only_defaults())


def train_grpo_baseline(data: TrainingData, source: PolicySource, start: str | None, rapo_args,
                        steps: int | None, run_id: str | None = None) -> None:
    """Train and save the baseline of the run ``rapo_args`` configures, for ``steps`` steps (None: the recipe's
    max_steps, or its epochs); the finished folder is stamped with ``run_id``, the ``rapo train`` run's."""
    folder = grpo_baseline_folder(rapo_args)
    unstamp_baseline(folder)
    trainer = build_trainer(data, source, start, grpo_baseline_args(rapo_args, steps), None)
    result = trainer.train()
    trainer.save_model(folder)
    save_history_and_plots(trainer, folder)
    if trainer.is_world_process_zero():
        stamp_baseline(folder, run_id)
    say(f"GRPO baseline (retrieval off): trained {trainer.state.global_step} steps in "
          f"{result.metrics['train_runtime']:.1f}s; saved to {folder}.")
