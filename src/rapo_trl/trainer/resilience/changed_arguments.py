"""A resume with other arguments than the checkpoint's run: what changes the resumed run silently, said in one warning.

Trainer restores the optimizer, the scheduler and the RNGs from a checkpoint and skips the batches its run trained,
counted in the resumed run's batch sizes over the resumed run's dataset. So, resumed with another ``learning_rate``
the run keeps the saved one; with another ``max_steps`` the learning-rate schedule and ``retrieve_prob``'s decay jump
to the new step count; with another ``seed`` the restored RNGs (TRL's and RAPO's retrieval RNG) keep the old one while
the prompt order takes the new one (and turning ``shuffle_dataset`` on or off changes the order); with other batch
sizes, group size or dataset the epoch it resumes in repeats some prompts and never reaches others. transformers warns only for ``per_device_train_batch_size``. Each checkpoint's RAPO
state records these arguments (``arguments``), and a resume names the ones that differ with what they do. Arguments
that apply as given (``retrieve_prob``, ``num_hybrid_generations``, the reward functions) are not named.
"""

from __future__ import annotations

import hashlib
import json
import logging

from rapo_trl.core.retrieval_rule import scheduled_retrieve_prob

logger = logging.getLogger("rapo_trl.trainer")

SKIPS_OTHER_PROMPTS = ("the batches its run trained are skipped counted in the new sizes, so this epoch can repeat some "
                       "prompts and never reach others")
SKIPS_BY_POSITION = ("the prompts its run trained are skipped by position in the new dataset, so this epoch repeats "
                     "some prompts and never reaches others")
CONSEQUENCES = {
    "learning_rate": "not applied: the optimizer and scheduler restored from the checkpoint keep the saved rate",
    "max_steps": "the learning-rate schedule and retrieve_prob's decay are spread over the new count from here: they "
                 "jump at the resumed step",
    "seed": "not applied to the RNGs restored from the checkpoint (TRL's and the retrieval RNG), while the prompt "
            "order follows it, so this epoch repeats some prompts and never reaches others",
    "shuffle_dataset": "the prompt order follows it while the trained batches are skipped by position, so this "
                       "epoch repeats some prompts and never reaches others",
    "per_device_train_batch_size": SKIPS_OTHER_PROMPTS,
    "gradient_accumulation_steps": SKIPS_OTHER_PROMPTS,
    "steps_per_generation": SKIPS_OTHER_PROMPTS,
    "num_generations": SKIPS_OTHER_PROMPTS,
    "num_iterations": SKIPS_OTHER_PROMPTS,
    "num_processes": SKIPS_OTHER_PROMPTS,
    "dataset_rows": SKIPS_BY_POSITION,
    "dataset_rows_digest": SKIPS_BY_POSITION,
}


def dataset_digest(dataset, samples: int = 64) -> str | None:
    """A digest of ``samples`` rows spread over ``dataset`` (another order or other rows change it), cheap on a large
    one; ``None`` for a dataset without a length (iterable)."""
    try:
        count = len(dataset)
        digest = hashlib.sha256()
        for index in sorted({i * count // samples for i in range(min(samples, count))}):
            digest.update(json.dumps(dataset[index], sort_keys=True, default=str).encode())
    except Exception:  # noqa: BLE001 - a dataset that cannot say is not compared
        return None
    return digest.hexdigest()[:16]


def run_arguments(trainer) -> dict:
    """The arguments a checkpoint records, and a resume compares, for ``trainer``'s run."""
    args = trainer.args
    dataset = trainer.train_dataset
    try:
        rows = len(dataset)
    except TypeError:
        rows = None
    return {
        "learning_rate": args.learning_rate,
        "max_steps": trainer.state.max_steps,
        "seed": args.seed,
        "shuffle_dataset": getattr(trainer, "shuffle_dataset", None),  # TRL's sampler shuffles by it
        "per_device_train_batch_size": args.per_device_train_batch_size,
        "gradient_accumulation_steps": args.gradient_accumulation_steps,
        "steps_per_generation": args.steps_per_generation,
        "num_generations": trainer.num_generations,
        "num_iterations": trainer.num_iterations,
        "num_processes": trainer.accelerator.num_processes,
        "dataset_rows": rows,
        "dataset_rows_digest": dataset_digest(dataset),
        "retrieve_prob": args.retrieve_prob,
        "retrieve_prob_final": args.retrieve_prob_final,
        "store_growth_min_reward": args.store_growth_min_reward,
    }


def warn_if_resumed_with_other_arguments(checkpoint: str, saved: dict | None, now: dict, step: int) -> list[str]:
    """One warning naming each argument in ``CONSEQUENCES`` that differs between the checkpoint's run (``saved``, as
    ``run_arguments`` recorded it; ``None`` for an older checkpoint: nothing said) and the resumed one (``now``), with
    what it does to the resumed run. Returns the names."""
    if not isinstance(saved, dict):
        return []
    changed = []
    for name, consequence in CONSEQUENCES.items():
        if name not in saved or name not in now or saved[name] is None or now[name] is None:
            continue
        if saved[name] == now[name]:
            continue
        if name == "dataset_rows_digest" and any(other == "dataset_rows" for other, _ in changed):
            continue  # one reason is enough
        values = "" if name == "dataset_rows_digest" else f" {saved[name]!r} -> {now[name]!r}"
        label = "the dataset's rows" if name == "dataset_rows_digest" else name
        if name == "max_steps" and now.get("retrieve_prob_final") is not None:
            before = scheduled_retrieve_prob(now["retrieve_prob"], now["retrieve_prob_final"], step, saved[name])
            after = scheduled_retrieve_prob(now["retrieve_prob"], now["retrieve_prob_final"], step, now[name])
            consequence += f" (p {before:.3g} -> {after:.3g} at step {step})"
        changed.append((name, f"{label}{values}: {consequence}"))
    if changed:
        logger.warning("RAPO: resuming from %s with other arguments than its run saved it with; the resumed run is not "
                       "the interrupted one continued: %s.", checkpoint, "; ".join(text for _, text in changed))
    return [name for name, _ in changed]
