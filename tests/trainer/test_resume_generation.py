"""A resume from a checkpoint that falls inside a generation cycle (one generation every two optimizer steps) trains
as the uninterrupted run: the batch generated before the checkpoint, and the place in its cycle, come back with it
(``trainer/resilience/generation_buffer.py``). The tiny model samples its completions, so a resume that generated
anew would see other rows."""

from __future__ import annotations

import logging
import shutil

import pytest
import torch
from datasets import Dataset

from rapo_trl.config import RAPOConfig
from rapo_trl.trainer import RAPOTrainer
from rapo_trl.trainer.resilience.generation_buffer import (
    GENERATION_BUFFER_FILE,
    aligned_save_steps,
    load_generation_buffer,
    save_generation_buffer,
)
from tests.helpers.fakes import EchoTool
from tests.helpers.trainers import common_args, sevens

STEPS = 4
CYCLES = {  # generation every two optimizer steps: by the batch's slices, and by reusing it for a second pass
    "steps_per_generation": dict(per_device_train_batch_size=2, steps_per_generation=2),
    "num_iterations": dict(per_device_train_batch_size=4, steps_per_generation=1, num_iterations=2),
}


def train(tiny_model_dir, output_dir, resume=None, **sizes):
    args = RAPOConfig(**common_args(output_dir, max_steps=STEPS, save_strategy="steps", save_steps=1,
                                    max_completion_length=16, **sizes), max_turn_tokens=8)
    rows = [{"prompt": [{"role": "user", "content": f"Compute {q}"}]} for q in range(4)]
    trainer = RAPOTrainer(str(tiny_model_dir), sevens, args=args, train_dataset=Dataset.from_list(rows),
                          tools=[EchoTool()])
    trainer.train(resume_from_checkpoint=resume)
    return {entry["step"]: {name: value for name, value in entry.items() if "time" not in name}
            for entry in trainer.state.log_history if "loss" in entry}


@pytest.fixture(scope="module")
def uninterrupted(tiny_model_dir, tmp_path_factory):
    """cycle -> (the run's folder, its log by step), each run once for the module."""
    runs = {}

    def run(cycle):
        if cycle not in runs:
            folder = tmp_path_factory.mktemp(cycle)
            runs[cycle] = folder, train(tiny_model_dir, folder, **CYCLES[cycle])
        return runs[cycle]

    return run


def resumed_from(checkpoint, output_dir):
    """A run folder holding only ``checkpoint`` (the uninterrupted run's later ones would be resumed from)."""
    shutil.copytree(checkpoint, output_dir / checkpoint.name)
    return output_dir


@pytest.mark.parametrize("cycle", list(CYCLES))
def test_a_resume_inside_a_generation_cycle_trains_as_the_uninterrupted_run(tiny_model_dir, tmp_path, cycle, caplog,
                                                                            uninterrupted):
    run, whole = uninterrupted(cycle)
    assert "reward" in whole[1] and "reward" not in whole[2]  # step 2 trains on step 1's generation
    folder = resumed_from(run / "checkpoint-1", tmp_path / "resumed")
    with caplog.at_level(logging.WARNING, logger="rapo_trl"):
        resumed = train(tiny_model_dir, folder, resume=True, **CYCLES[cycle])
    assert "generation cycle" not in caplog.text
    for step in range(2, STEPS + 1):
        assert resumed[step] == whole[step], (step, resumed[step], whole[step])


def test_a_checkpoint_inside_a_cycle_without_its_batch_says_how_to_save_for_an_exact_resume(tiny_model_dir, tmp_path,
                                                                                           caplog, uninterrupted):
    run, _ = uninterrupted("steps_per_generation")
    folder = resumed_from(run / "checkpoint-1", tmp_path / "resumed")
    (folder / "checkpoint-1" / GENERATION_BUFFER_FILE.format(process=0)).unlink()  # as an older checkpoint
    with caplog.at_level(logging.WARNING, logger="rapo_trl"):
        train(tiny_model_dir, folder, resume=True, **CYCLES["steps_per_generation"])
    assert "saved at micro-step 1 of a generation cycle of 2" in caplog.text
    assert "save_steps a multiple of 2" in caplog.text


def test_a_saved_batch_is_handed_back_only_to_the_sizes_it_was_cut_for(tmp_path):
    layout = dict(steps_per_generation=4, num_iterations=1, per_device_train_batch_size=2, num_processes=1)
    batch = [{"advantages": torch.tensor([float(i)])} for i in range(4)]
    save_generation_buffer(str(tmp_path), 0, 6, batch, layout)
    saved, problem = load_generation_buffer(str(tmp_path), 0, layout, torch.device("cpu", 0))  # a CPU process's device
    assert problem is None and saved.step == 6 and [b["advantages"].item() for b in saved.inputs] == [0, 1, 2, 3]
    saved, problem = load_generation_buffer(str(tmp_path), 0, {**layout, "num_processes": 2})
    assert saved is None and "num_processes 1 -> 2" in problem
    save_generation_buffer(str(tmp_path), 0, 8, batch, layout)  # a cycle's start: nothing to hand back but the step
    assert load_generation_buffer(str(tmp_path), 0, layout)[0].inputs is None
    assert load_generation_buffer(str(tmp_path / "none"), 0, layout) == (None, None)
    assert aligned_save_steps(layout, gradient_accumulation_steps=2) == 2
    assert aligned_save_steps({**layout, "steps_per_generation": 3}, gradient_accumulation_steps=2) == 3
