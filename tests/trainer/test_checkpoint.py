"""RAPO's checkpoint file: written atomically, read back, and a precise reason when it cannot be."""

from __future__ import annotations

import json
import logging
import shutil

import pytest

from rapo_trl.trainer.resilience.checkpoint import load_rapo_state, save_rapo_state


class Engine:
    def __init__(self, state=None):
        self.state = state

    def get_state(self):
        return {"rng": [1, 2, 3]}

    def set_state(self, state):
        self.state = state


class BrokenStore:
    def describe(self):
        raise RuntimeError("server gone")


def test_round_trip_and_a_store_that_cannot_describe_itself(tmp_path):
    path = save_rapo_state(str(tmp_path), 1, Engine(), BrokenStore())
    assert path.endswith("rapo_state_1.json") and [p.name for p in tmp_path.iterdir()] == ["rapo_state_1.json"]
    assert json.loads(open(path).read())["store"] == {"error": "RuntimeError: server gone"}
    engine = Engine()
    assert load_rapo_state(str(tmp_path), 1, engine) is None and engine.state == {"rng": [1, 2, 3]}


def test_missing_or_unreadable_state_is_described(tmp_path):
    assert load_rapo_state(str(tmp_path), 0, Engine()) == "has no rapo_state_0.json (RAPO's rollout state)"
    (tmp_path / "rapo_state_0.json").write_text("{not json")
    assert load_rapo_state(str(tmp_path), 0, Engine()).startswith("has an unreadable rapo_state_0.json (JSONDecodeError")


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp_file(tmp_path, monkeypatch):
    (tmp_path / "rapo_state_0.json").write_text('{"engine": {"rng": [9]}}')

    def killed(*args):
        raise KeyboardInterrupt  # e.g. the run is stopped between write and rename

    monkeypatch.setattr("rapo_trl.trainer.resilience.checkpoint.os.replace", killed)
    with pytest.raises(KeyboardInterrupt):
        save_rapo_state(str(tmp_path), 0, Engine(), None)
    assert [p.name for p in tmp_path.iterdir()] == ["rapo_state_0.json"]
    assert json.loads((tmp_path / "rapo_state_0.json").read_text()) == {"engine": {"rng": [9]}}


def _save(run_dir, step, run, clock):
    """A whole checkpoint as a run saves it: RAPO's state, then Trainer's trainer_state.json last."""
    folder = run_dir / f"checkpoint-{step}"
    save_rapo_state(str(folder), 0, Engine(), None, run=run)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    clock.append(step)


@pytest.fixture
def clock(monkeypatch):
    """Each save one second after the one before, whatever the machine's clock resolution."""
    from types import SimpleNamespace

    from rapo_trl.trainer.resilience import checkpoint

    saves: list[int] = []
    monkeypatch.setattr(checkpoint, "time", SimpleNamespace(time=lambda: 1000.0 + len(saves)), raising=False)
    return saves


def test_a_bare_resume_takes_the_run_that_saved_last_not_an_earlier_runs_higher_step(tmp_path, clock, caplog):
    from rapo_trl.trainer.resilience.checkpoint import checked_resume

    for step in (10, 20, 30):
        _save(tmp_path, step, "old", clock)
    for step in (15, 20):  # resumed from checkpoint-10 and stopped: checkpoint-20 is replaced, 30 stays
        shutil.rmtree(tmp_path / f"checkpoint-{step}", ignore_errors=True)
        _save(tmp_path, step, "new", clock)
    with caplog.at_level(logging.WARNING, logger="rapo_trl.trainer"):
        assert checked_resume(True, str(tmp_path)) == str(tmp_path / "checkpoint-20")
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "checkpoint-20, the checkpoint saved last" in warning and "checkpoint-30 has a higher step" in warning


def test_a_bare_resume_of_one_run_takes_its_newest_checkpoint_quietly(tmp_path, clock, caplog):
    from rapo_trl.trainer.resilience.checkpoint import checked_resume

    for step in (5, 10):
        _save(tmp_path, step, "only", clock)
    with caplog.at_level(logging.WARNING, logger="rapo_trl.trainer"):
        assert checked_resume(True, str(tmp_path)) == str(tmp_path / "checkpoint-10")
    assert caplog.records == []
