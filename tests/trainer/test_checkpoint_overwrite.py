"""An earlier run's checkpoints where a run trains: moved aside when it trains from the start; where a resumed run
saves a step an abandoned branch left a folder of, a save killed before Trainer writes trainer_state.json must not
leave that folder passing as whole."""

from __future__ import annotations

import json
import logging

import pytest
from transformers import TrainerState

from rapo_trl.trainer.resilience.checkpoint import checked_resume
from tests.helpers.trainers import rapo_trainer, script


def test_a_save_killed_over_an_earlier_runs_checkpoint_is_not_taken_as_whole(tiny_model_dir, tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    first = rapo_trainer(tiny_model_dir, run_dir, max_steps=1, save_strategy="steps", save_steps=1)
    script(first)
    first.train()
    earlier = run_dir / "checkpoint-2"  # an abandoned branch's whole checkpoint of the step the resumed run saves
    earlier.mkdir()
    (earlier / "trainer_state.json").write_text(json.dumps({"global_step": 2, "log_history": []}))
    (earlier / "rapo_state_1.json").write_text("{}")  # its second process's state: this run has one process

    trainer = rapo_trainer(tiny_model_dir, run_dir, max_steps=2, save_strategy="steps", save_steps=1)
    script(trainer)

    def killed(self, path):  # the process dies after the weights, optimizer and RNG states, before this file
        raise KeyboardInterrupt

    monkeypatch.setattr(TrainerState, "save_to_json", killed)
    with pytest.raises(KeyboardInterrupt):
        trainer.train(resume_from_checkpoint=str(run_dir / "checkpoint-1"))
    assert (earlier / "model.safetensors").exists()  # this run's weights were written into the folder
    assert not (earlier / "rapo_state_1.json").exists()  # nothing of the earlier run's left beside them
    # Not this run's weights under the earlier branch's trainer_state.json: the whole checkpoint before it.
    assert checked_resume(True, str(run_dir)) == str(run_dir / "checkpoint-1")


def test_training_from_the_start_moves_an_earlier_runs_checkpoints_aside(tiny_model_dir, tmp_path, caplog):
    """Left in place, the earlier run's checkpoint-5 is counted in this run's save_total_limit: Trainer's rotation
    deletes it (by mtime), or this run's own checkpoint-1 (by step, on a filesystem whose mtimes it doubts), and a later
    bare resume would take it over this run's by step."""
    run_dir = tmp_path / "run"
    earlier = run_dir / "checkpoint-5"
    earlier.mkdir(parents=True)
    (earlier / "trainer_state.json").write_text(json.dumps({"global_step": 5, "log_history": []}))

    trainer = rapo_trainer(tiny_model_dir, run_dir, max_steps=1, save_strategy="steps", save_steps=1,
                           save_total_limit=1)
    script(trainer)
    with caplog.at_level(logging.WARNING, logger="rapo_trl.trainer"):
        trainer.train()
    assert sorted(path.name for path in run_dir.glob("checkpoint-*")) == ["checkpoint-1"]  # this run's, kept
    (aside,) = run_dir.glob("earlier-run-*")  # the earlier run's, whole and apart
    assert json.loads((aside / "checkpoint-5" / "trainer_state.json").read_text())["global_step"] == 5
    assert str(aside) in caplog.text


def test_resuming_a_checkpoint_set_aside_moves_the_later_runs_checkpoints_aside(tiny_model_dir, tmp_path, caplog):
    """Run A's checkpoint-1, set aside when run B started over, resumed by name (as the set-aside line advises) into
    the output_dir where B's checkpoint-5 lies: left in place, save_total_limit would delete B's checkpoint to keep
    A's new one."""
    run_dir = tmp_path / "run"
    first = rapo_trainer(tiny_model_dir, tmp_path / "a", max_steps=1, save_strategy="steps", save_steps=1)
    script(first)
    first.train()
    earlier = run_dir / "earlier-run-20260101-000000" / "checkpoint-1"
    earlier.parent.mkdir(parents=True)
    (tmp_path / "a" / "checkpoint-1").rename(earlier)
    later = run_dir / "checkpoint-5"
    later.mkdir()
    (later / "trainer_state.json").write_text(json.dumps({"global_step": 5, "log_history": []}))

    trainer = rapo_trainer(tiny_model_dir, run_dir, max_steps=2, save_strategy="steps", save_steps=1,
                           save_total_limit=1)
    script(trainer)
    with caplog.at_level(logging.WARNING, logger="rapo_trl.trainer"):
        trainer.train(resume_from_checkpoint=str(earlier))
    assert sorted(path.name for path in run_dir.glob("checkpoint-*")) == ["checkpoint-2"]  # A's, continued
    (aside,) = set(run_dir.glob("earlier-run-*")) - {earlier.parent}
    assert json.loads((aside / "checkpoint-5" / "trainer_state.json").read_text())["global_step"] == 5
    assert f"on from {earlier}" in caplog.text


def test_a_mistyped_checkpoint_is_refused_before_the_runs_checkpoints_move(tiny_model_dir, tmp_path):
    """A path that is no folder is refused before anything moves: a run resumed from a checkpoint elsewhere sets
    output_dir's checkpoints aside first, which a typo should not do."""
    run_dir = tmp_path / "run"
    kept = run_dir / "checkpoint-5"
    kept.mkdir(parents=True)
    (kept / "trainer_state.json").write_text(json.dumps({"global_step": 5, "log_history": []}))
    trainer = rapo_trainer(tiny_model_dir, run_dir, max_steps=1)
    with pytest.raises(ValueError, match="is not a folder: there is no checkpoint to resume from there"):
        trainer.train(resume_from_checkpoint=str(tmp_path / "chekpoint-5"))
    assert kept.is_dir() and not list(run_dir.glob("earlier-run-*"))
