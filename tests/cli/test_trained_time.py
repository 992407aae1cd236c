"""The equal-time SFT baseline gets the time RL trained over every session of a resumed run, not the last one's."""

from __future__ import annotations

import time

import pytest


def _trainer(tmp_path, max_steps: int, callbacks):
    import torch
    from datasets import Dataset
    from transformers import Trainer, TrainerCallback, TrainingArguments

    class Linear(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)

        def forward(self, x, labels=None):
            return {"loss": ((self.layer(x) - labels) ** 2).mean()}

    class Slow(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            time.sleep(0.3)

    args = TrainingArguments(output_dir=str(tmp_path), max_steps=max_steps, save_steps=1, save_strategy="steps",
                             per_device_train_batch_size=1, report_to="none", use_cpu=True, logging_steps=1,
                             disable_tqdm=True)
    data = Dataset.from_list([{"x": [1.0], "labels": [2.0]}] * 8)
    return Trainer(Linear(), args, train_dataset=data, callbacks=[Slow(), *callbacks])


@pytest.mark.parametrize("with_callback_at_first", [True, False])
def test_a_resumed_run_counts_the_seconds_its_checkpoint_had_trained(tmp_path, with_callback_at_first):
    from rapo_trl.cli.trained_time import TrainedSeconds

    first = _trainer(tmp_path, 3, [TrainedSeconds()] if with_callback_at_first else [])
    first.train()
    resumed = _trainer(tmp_path, 5, [TrainedSeconds()])
    result = resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-3"))
    seconds = TrainedSeconds.of(resumed)
    assert resumed.state.global_step == 5 and result.metrics["train_runtime"] < 1.2  # the 2 steps after the resume
    # 5 steps of 0.3 s when the checkpoint counted its 3; a checkpoint of a run without it resumes (counting 2)
    assert seconds >= (1.5 if with_callback_at_first else 0.6)
    assert seconds < 1.2 or with_callback_at_first
