"""RAPO's checkpoint file: written atomically, read back, and a precise reason when it cannot be."""

from __future__ import annotations

import json

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
