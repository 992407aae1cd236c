"""The disk fills while a checkpoint is saved: the save fails with the folder and the space it needs named, the
half-written folder is removed, the previous checkpoint stays whole and loadable, and a resume never takes a
half-written one. A real full disk where a 1.7 MiB tmpfs can be mounted (root); everywhere, torch.save failing as
it does on a full disk (deterministic)."""

from __future__ import annotations

import json
import logging
import subprocess

import pytest
import torch
from transformers import AutoModelForCausalLM, TrainerCallback

from rapo_trl.trainer.resilience.checkpoint import CheckpointSaveError, checked_resume
from tests.helpers.trainers import rapo_trainer, script


class ScriptEachStep(TrainerCallback):
    def __init__(self, trainer):
        self.trainer = trainer

    def on_step_begin(self, args, state, control, **kwargs):
        script(self.trainer)


@pytest.fixture
def small_disk(tmp_path):
    """A 1.7 MiB tmpfs: one tiny-model checkpoint (~1.1 MiB) fits, a second does not."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1700k", "tmpfs", str(mount)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def _train_until_the_second_save_fails(tiny_model_dir, run_dir):
    trainer = rapo_trainer(tiny_model_dir, run_dir, max_steps=2, save_strategy="steps", save_steps=1)
    trainer.add_callback(ScriptEachStep(trainer))
    with pytest.raises(CheckpointSaveError) as caught:
        trainer.train()
    return str(caught.value)


def _assert_whole_and_loadable(run_dir, tiny_model_dir):
    first = run_dir / "checkpoint-1"
    assert not (run_dir / "checkpoint-2").exists()  # the half-written folder is gone
    assert json.loads((first / "trainer_state.json").read_text())["global_step"] == 1
    AutoModelForCausalLM.from_pretrained(first)
    torch.load(first / "optimizer.pt", weights_only=True)
    assert checked_resume(True, str(run_dir)) == str(first)


def test_a_full_tmpfs_fails_the_save_and_keeps_the_last_checkpoint(small_disk, tiny_model_dir):
    message = _train_until_the_second_save_fails(tiny_model_dir, small_disk)
    assert f"No space left to save the checkpoint {small_disk}/checkpoint-2" in message
    assert "needs about 1.1 MiB" in message and f"last whole checkpoint is {small_disk}/checkpoint-1" in message
    _assert_whole_and_loadable(small_disk, tiny_model_dir)


def test_torch_save_failing_as_on_a_full_disk(tiny_model_dir, tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    real_save = torch.save

    def save(obj, f, *args, **kwargs):  # as torch reports ENOSPC: half a file, then a RuntimeError
        if "checkpoint-2" in str(f):
            with open(f, "wb") as handle:
                handle.write(b"\0" * 1000)
            raise RuntimeError(f"[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing file "
                               f"data/0: file write failed ({f})")
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)
    message = _train_until_the_second_save_fails(tiny_model_dir, run_dir)
    assert f"No space left to save the checkpoint {run_dir}/checkpoint-2" in message
    _assert_whole_and_loadable(run_dir, tiny_model_dir)


def test_a_resume_skips_or_refuses_a_half_written_checkpoint(tmp_path, caplog):
    for step, state in ((1, '{"global_step": 1}'), (2, '{"global_st'), (3, None)):  # 2: cut mid-write; 3: no state
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        if state is not None:
            (folder / "trainer_state.json").write_text(state)
    with caplog.at_level(logging.WARNING, logger="rapo_trl.trainer"):
        assert checked_resume(True, str(tmp_path)) == str(tmp_path / "checkpoint-1")
    assert "skipping half-written checkpoint(s)" in caplog.text and "checkpoint-3" in caplog.text
    with pytest.raises(ValueError, match="checkpoint-2 is not a whole checkpoint.*earlier one: .*checkpoint-1"):
        checked_resume(str(tmp_path / "checkpoint-2"), str(tmp_path))
    assert checked_resume(str(tmp_path / "checkpoint-1"), str(tmp_path)) == str(tmp_path / "checkpoint-1")
