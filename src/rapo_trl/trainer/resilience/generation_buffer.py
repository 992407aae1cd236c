"""The generation a checkpoint falls inside, saved with it and handed back on resume.

GRPOTrainer generates one batch every ``steps_per_generation * num_iterations`` micro-steps (its ``_step`` counts
them) and hands out slices of it (``_buffered_inputs``) until the next. Where that cycle is longer than an optimizer
step (``steps_per_generation > gradient_accumulation_steps``, or ``num_iterations > 1``) a checkpoint can fall inside
it, and TRL saves neither: a resumed run starts at ``_step = 0`` with no batch, so it generates at once (with weights
and an RNG the uninterrupted run did not generate with), trains on the new batch's first slice where the
uninterrupted run trained on a later slice of its batch, and generates on a shifted cycle from then on. Each process
saves its ``_step`` and, inside a cycle, its batch (``generation_buffer_{process}.pt``); a resume hands both back, so
the run goes on as the uninterrupted one does.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass

import torch
from accelerate.utils import gather_object, send_to_device

from rapo_trl.trainer.resilience.checkpoint import write_atomically

GENERATION_BUFFER_FILE = "generation_buffer_{process}.pt"

logger = logging.getLogger("rapo_trl.trainer")


def generation_layout(trainer) -> dict:
    """What a saved batch's slices are cut by: a resume with another layout cannot use them."""
    return {
        "steps_per_generation": trainer.args.steps_per_generation,
        "num_iterations": trainer.num_iterations,
        "per_device_train_batch_size": trainer.args.per_device_train_batch_size,
        "num_processes": trainer.accelerator.num_processes,
    }


def cycle_length(layout: dict) -> int:
    """Micro-steps from one generation to the next."""
    return layout["steps_per_generation"] * layout["num_iterations"]


def save_generation_buffer(folder: str, process_index: int, step: int, buffered_inputs, layout: dict) -> str:
    """Write this process's ``_step`` and, inside a cycle, its generated batch, atomically (``write_atomically``).
    At a cycle's start the batch is not needed: the next micro-step generates anyway."""
    inside = step % cycle_length(layout) != 0 and buffered_inputs is not None
    state = {"step": step, "layout": layout, "inputs": buffered_inputs if inside else None}
    return write_atomically(folder, GENERATION_BUFFER_FILE.format(process=process_index),
                            lambda temp: torch.save(state, temp))


@dataclass
class SavedGeneration:
    """A checkpoint's place in its generation cycle, as one process saved it."""

    step: int
    """The process's ``_step`` (micro-steps trained) at the checkpoint."""
    inputs: list | None
    """The batch's slices inside a cycle; ``None`` at a cycle's start."""


def load_generation_buffer(checkpoint: str, process_index: int, layout: dict,
                           device=None) -> tuple[SavedGeneration | None, str | None]:
    """The saved place in the cycle, or ``None`` and what is wrong (``None`` too where there is nothing to say: an
    older checkpoint, whose place the caller estimates)."""
    name = GENERATION_BUFFER_FILE.format(process=process_index)
    path = os.path.join(checkpoint, name)
    if not os.path.exists(path):
        return None, None
    try:
        # Loaded on the CPU, then moved: a process's device can be a "cpu:N" that map_location does not take.
        state = torch.load(path, map_location="cpu", weights_only=True)
        step, saved_layout, inputs = int(state["step"]), state["layout"], state["inputs"]
        if device is not None:
            inputs = send_to_device(inputs, device)
    except Exception as error:  # noqa: BLE001 - any unreadable file: the run generates anew, and says so
        return None, f"has an unreadable {name} ({type(error).__name__}: {error})"
    if saved_layout != layout:
        changed = ", ".join(f"{key} {saved_layout.get(key)!r} -> {value!r}" for key, value in layout.items()
                            if saved_layout.get(key) != value)
        return None, f"holds a generated batch cut for other sizes ({changed})"
    return SavedGeneration(step, inputs), None


def estimated_step(global_step: int, gradient_accumulation_steps: int) -> int:
    """``_step`` at a checkpoint that did not save it: micro-steps are optimizer steps times the accumulation (exact
    unless an epoch ended on a short accumulation)."""
    return global_step * gradient_accumulation_steps


def aligned_save_steps(layout: dict, gradient_accumulation_steps: int) -> int:
    """The smallest ``save_steps`` whose checkpoints all fall at a cycle's start."""
    cycle = cycle_length(layout)
    return cycle // math.gcd(cycle, gradient_accumulation_steps)


def warn_generation_lost(checkpoint: str, problem: str, step: int, layout: dict,
                         gradient_accumulation_steps: int) -> None:
    """Say that a resume from inside a cycle generates anew, where, and what to do for an exact resume."""
    cycle = cycle_length(layout)
    logger.warning(
        "RAPO: checkpoint %s was saved at micro-step %d of a generation cycle of %d (steps_per_generation * "
        "num_iterations) but %s: the resumed run generates a new batch at once and on a shifted cycle from then on, "
        "so it is not the interrupted run continued. An exact resume needs a checkpoint at a cycle's start: "
        "save_steps a multiple of %d.", checkpoint, step % cycle, cycle, problem,
        aligned_save_steps(layout, gradient_accumulation_steps))


def save_generation(trainer, folder: str) -> str:
    """``save_generation_buffer`` for ``trainer``'s process."""
    return save_generation_buffer(folder, trainer.accelerator.process_index, trainer._step, trainer._buffered_inputs,
                                  generation_layout(trainer))


def resume_generation(trainer, checkpoint: str) -> bool:
    """Hand ``trainer`` its ``_step`` and generated batch back from ``checkpoint``; whether it did. Every process
    must, or none does: a process that generated while another did not would wait in the generation's gathers."""
    accelerator = trainer.accelerator
    layout = generation_layout(trainer)
    saved, problem = load_generation_buffer(checkpoint, accelerator.process_index, layout, accelerator.device)
    if saved is None and problem is None:
        problem = (f"has no {GENERATION_BUFFER_FILE.format(process=accelerator.process_index)} (saved by an older "
                   "rapo_trl, or by GRPOTrainer)")
    if all(gather_object([saved is not None])):
        trainer._step, trainer._buffered_inputs = saved.step, saved.inputs
        return True
    if problem is None:
        problem = "another process's generated batch could not be restored"
    ga = trainer.args.gradient_accumulation_steps
    step = saved.step if saved is not None else estimated_step(trainer.state.global_step, ga)
    if step % cycle_length(layout):
        warn_generation_lost(checkpoint, problem, step, layout, ga)
    return False
