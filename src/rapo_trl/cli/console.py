"""The logging and warning filters every ``rapo`` process runs with (the command's, and the GRPO baseline's second
process under ``grpo_alongside``), and the command's lines printed once under a multi-process launch."""

from __future__ import annotations

import logging
import os
import warnings


def configure_console() -> None:
    # Under a multi-process launch every process logs what it does: the first logs its INFO lines, the others only
    # warnings and errors (as TrainingArguments' `log_level_replica` defaults for the trainer's own logging).
    level = logging.INFO if is_main_process() else logging.WARNING
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    # TRL's configs default `gradient_checkpointing`, which transformers now warns is a deprecated alias:
    # noise on every command that says nothing about the user's recipe.
    warnings.filterwarnings("ignore", message=r"`(is_)?gradient_checkpointing\w*` is deprecated", category=FutureWarning)


def is_main_process() -> bool:
    """Whether this is the first process of a launch (global rank 0), or the only one: ``torchrun`` and ``accelerate
    launch`` give each process they start its ``RANK``. Read from the environment, so it answers before any model,
    trainer or process group exists."""
    return int(os.environ.get("RANK") or 0) == 0


def launched_processes() -> int:
    """How many processes this launch trains in (``WORLD_SIZE``, which ``torchrun`` and ``accelerate launch`` give
    each of them), 1 when run alone: read from the environment, before any process group exists."""
    return int(os.environ.get("WORLD_SIZE") or 1)


def say(line: str) -> None:
    """Print ``line`` in the launch's first process alone: under ``torchrun`` every process runs the command, and
    would repeat each of its lines once per process."""
    if is_main_process():
        print(line)
