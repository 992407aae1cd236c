"""A checkpoint saved where an earlier run (or an abandoned branch of this one) left a folder of the same step: the
save is killed before Trainer writes trainer_state.json, so the folder must not pass as whole."""

from __future__ import annotations

import json

import pytest
from transformers import TrainerState

from rapo_trl.trainer.resilience.checkpoint import checked_resume
from tests.helpers.trainers import rapo_trainer, script


def test_a_save_killed_over_an_earlier_runs_checkpoint_is_not_taken_as_whole(tiny_model_dir, tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    earlier = run_dir / "checkpoint-1"  # an earlier run's whole checkpoint of the same step
    earlier.mkdir(parents=True)
    (earlier / "trainer_state.json").write_text(json.dumps({"global_step": 1, "log_history": []}))
    (earlier / "rapo_state_1.json").write_text("{}")  # its second process's state: this run has one process

    trainer = rapo_trainer(tiny_model_dir, run_dir, max_steps=1, save_strategy="steps", save_steps=1)
    script(trainer)

    def killed(self, path):  # the process dies after the weights, optimizer and RNG states, before this file
        raise KeyboardInterrupt

    monkeypatch.setattr(TrainerState, "save_to_json", killed)
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    assert (earlier / "model.safetensors").exists()  # this run's weights were written into the folder
    assert not (earlier / "rapo_state_1.json").exists()  # nothing of the earlier run's left beside them
    with pytest.raises(ValueError, match="holds no whole checkpoint"):
        checked_resume(True, str(run_dir))  # not this run's weights under the earlier run's trainer_state.json
