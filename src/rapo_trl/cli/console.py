"""The logging and warning filters every ``rapo`` process runs with (the command's, and the GRPO baseline's second
process under ``grpo_alongside``), and the command's lines printed once under a multi-process launch."""

from __future__ import annotations

import logging
import os
import warnings


def configure_console() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    # TRL's configs default `gradient_checkpointing`, which transformers now warns is a deprecated alias:
    # noise on every command that says nothing about the user's recipe.
    warnings.filterwarnings("ignore", message=r"`(is_)?gradient_checkpointing\w*` is deprecated", category=FutureWarning)


def is_main_process() -> bool:
    """Whether this is the first process of a launch (global rank 0), or the only one: ``torchrun`` and ``accelerate
    launch`` give each process they start its ``RANK``. Read from the environment, so it answers before any model,
    trainer or process group exists."""
    return int(os.environ.get("RANK") or 0) == 0


def say(line: str) -> None:
    """Print ``line`` in the launch's first process alone: under ``torchrun`` every process runs the command, and
    would repeat each of its lines once per process."""
    if is_main_process():
        print(line)
