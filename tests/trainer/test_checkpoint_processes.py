"""A checkpoint saved by several processes is whole only when every process's part is in it: Trainer's
``trainer_state.json`` is written by process 0 alone, without waiting for the others, so a run killed in between left
a folder a bare resume took as whole."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest

from rapo_trl.saved_checkpoints import is_complete_checkpoint
from rapo_trl.trainer.resilience import checkpointing
from rapo_trl.trainer.resilience.checkpoint import checked_resume, checkpoint_to_resume


class Engine:
    def get_state(self):
        return {"rng": [1, 2, 3]}


def _checkpoint(run_dir, step, processes_saved, num_processes, save_on_each_node=False):
    """``checkpoint-{step}`` as a run of ``num_processes`` leaves it with the RAPO state of ``processes_saved`` written
    and process 0's ``trainer_state.json``."""
    folder = run_dir / f"checkpoint-{step}"
    folder.mkdir()
    for index in processes_saved:
        state = {"engine": None, "num_processes": num_processes, "save_on_each_node": save_on_each_node}
        (folder / f"rapo_state_{index}.json").write_text(json.dumps(state))
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return folder


def test_a_checkpoint_without_another_processs_state_is_not_whole(tmp_path):
    assert not is_complete_checkpoint(str(_checkpoint(tmp_path, 2, [0], num_processes=2)))
    assert not is_complete_checkpoint(str(_checkpoint(tmp_path, 3, [0, 2], num_processes=3)))
    assert is_complete_checkpoint(str(_checkpoint(tmp_path, 4, [0, 1], num_processes=2)))
    assert is_complete_checkpoint(str(_checkpoint(tmp_path, 5, [1, 0], num_processes=2)))  # in whichever order


def test_a_bare_resume_skips_a_checkpoint_killed_before_every_process_saved(tmp_path, caplog):
    whole = _checkpoint(tmp_path, 1, [0, 1], num_processes=2)
    cut = _checkpoint(tmp_path, 2, [0], num_processes=2)
    with caplog.at_level(logging.WARNING, logger="rapo_trl.trainer"):
        assert checkpoint_to_resume(str(tmp_path)) == str(whole)
    assert "skipping half-written checkpoint(s)" in caplog.text and str(cut) in caplog.text
    assert "not every process's RAPO state" in caplog.text
    with pytest.raises(ValueError, match="checkpoint-2 is not a whole checkpoint.*earlier one: .*checkpoint-1"):
        checked_resume(str(cut), str(tmp_path))


def test_a_one_process_checkpoint_is_whole_as_before(tmp_path):
    assert is_complete_checkpoint(str(_checkpoint(tmp_path, 1, [0], num_processes=1)))
    (tmp_path / "checkpoint-1" / "trainer_state.json").unlink()
    assert not is_complete_checkpoint(str(tmp_path / "checkpoint-1"))


def test_checkpoints_that_record_no_process_count_keep_the_earlier_rule(tmp_path):
    older = tmp_path / "checkpoint-1"  # saved before the count was recorded: trainer_state.json alone says whole
    older.mkdir()
    (older / "rapo_state_0.json").write_text(json.dumps({"engine": None, "arguments": {"num_processes": 2}}))
    (older / "trainer_state.json").write_text("{}")
    assert is_complete_checkpoint(str(older))
    other_trainers = tmp_path / "checkpoint-2"  # no RAPO state at all (another trainer's, or save_only_model)
    other_trainers.mkdir()
    (other_trainers / "trainer_state.json").write_text("{}")
    assert is_complete_checkpoint(str(other_trainers))


def test_with_save_on_each_node_a_nodes_folder_need_not_hold_the_other_nodes_states(tmp_path):
    # Each node's local main process writes trainer_state.json into its own output_dir, which may be the node's own
    # disk: the folder then holds only that node's processes' states.
    assert is_complete_checkpoint(str(_checkpoint(tmp_path, 1, [0, 1], num_processes=4, save_on_each_node=True)))


def test_each_process_saves_its_rapo_state_after_the_rest_of_its_part(tmp_path, monkeypatch):
    """A process's RAPO state is the last file it writes into a checkpoint, so that its presence says the process's
    RNG state and generated batch are there too."""
    written = []

    class Trainer:
        def _save_rng_state(self, output_dir):
            written.append("rng_state_1.pth")

    class Saving(checkpointing.CheckpointingMixin, Trainer):
        accelerator = SimpleNamespace(process_index=1, num_processes=2)
        args = SimpleNamespace(save_on_each_node=False)
        rollout_engine, trace_store, growth_run, run_id = Engine(), None, None, None

    monkeypatch.setattr(checkpointing, "run_arguments", lambda trainer: {})
    monkeypatch.setattr(checkpointing, "save_generation", lambda trainer, folder: written.append("generation_buffer_1.pt"))
    real_save = checkpointing.save_rapo_state

    def save_rapo_state(folder, process_index, *args, **kwargs):
        written.append(f"rapo_state_{process_index}.json")
        return real_save(folder, process_index, *args, **kwargs)

    monkeypatch.setattr(checkpointing, "save_rapo_state", save_rapo_state)
    Saving()._save_rng_state(str(tmp_path))
    assert written == ["rng_state_1.pth", "generation_buffer_1.pt", "rapo_state_1.json"]
    state = json.loads((tmp_path / "rapo_state_1.json").read_text())
    assert state["num_processes"] == 2 and state["save_on_each_node"] is False
