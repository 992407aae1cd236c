"""Training settings checked from the recipe alone, before torch, TRL, a model or an embedder loads: the batch shape
GRPOConfig would refuse (whole groups of ``num_generations``), and the ``report_to`` trackers' packages."""

from __future__ import annotations

import importlib.util
import os

from rapo_trl.cli.errors import UsageError

TRACKER_MODULES = {
    "wandb": ("wandb",), "tensorboard": ("tensorboard", "tensorboardX"), "comet_ml": ("comet_ml",),
    "mlflow": ("mlflow",), "trackio": ("trackio",), "swanlab": ("swanlab",), "clearml": ("clearml",),
    "dvclive": ("dvclive",), "neptune": ("neptune",), "codecarbon": ("codecarbon",), "azure_ml": ("azureml",),
    "dagshub": ("dagshub",), "flyte": ("flytekit",),
}
"""transformers' ``report_to`` names and the packages that provide them (any one of them will do)."""


def check_batch_shape(args) -> None:
    """GRPOConfig's rule, from the recipe's values: the generation batch (and the eval batch, when evaluating)
    holds whole groups of ``num_generations``."""
    generations = getattr(args, "num_generations", None)
    if not isinstance(generations, int) or generations < 1:
        return  # out of range: rapo_trl.ranges says so
    processes = int(os.environ.get("WORLD_SIZE", "1"))
    per_device = getattr(args, "per_device_train_batch_size", 8)
    size, steps = getattr(args, "generation_batch_size", None), getattr(args, "steps_per_generation", None)
    if size is None:
        steps = steps if steps is not None else getattr(args, "gradient_accumulation_steps", 1)
        size, how = per_device * processes * steps, (f" = per_device_train_batch_size {per_device} x {processes} "
                                                     f"process(es) x steps_per_generation {steps}")
    else:
        how = ""
    if size % generations:
        raise UsageError(f"generation_batch_size ({size}{how}) must be divisible by num_generations ({generations}): "
                         "each prompt's group is generated in one batch; change per_device_train_batch_size, "
                         "gradient_accumulation_steps or num_generations")
    strategy = getattr(args, "eval_strategy", "no") or "no"
    strategy = str(getattr(strategy, "value", strategy))  # transformers' IntervalStrategy once parsed
    eval_generations = getattr(args, "num_generations_eval", None) or generations
    eval_size = getattr(args, "per_device_eval_batch_size", 8) * processes
    if strategy != "no" and eval_size % eval_generations:
        raise UsageError(f"the eval batch (per_device_eval_batch_size x {processes} process(es) = {eval_size}) must be "
                         f"divisible by the generations per eval prompt ({eval_generations}); set "
                         "per_device_eval_batch_size")


def check_report_to(args) -> None:
    """Each tracker ``report_to`` names has its package installed (transformers would refuse it after the model
    loaded)."""
    named = getattr(args, "report_to", None)
    names = [named] if isinstance(named, str) else list(named or [])
    for name in names:
        modules = TRACKER_MODULES.get(name)
        if modules and not any(importlib.util.find_spec(module) for module in modules):
            raise UsageError(f"report_to {name} needs the {modules[0]} package, which is not installed: pip install "
                             f"{modules[0]}, or set --report_to none")
