"""`--resume_from_checkpoint` as Trainer takes it: alone or `true` the newest whole checkpoint, a folder that is not
there or not whole refused in one line before anything loads, and no "resuming from" line before a refusal."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from rapo_trl.cli import parse_recipe, read_recipe
from rapo_trl.cli.common import UsageError
from rapo_trl.cli.run_record import RUN_RECORD, run_id_for
from rapo_trl.cli.train import resume_from
from rapo_trl.saved_checkpoints import checkpoint_saved_last
from rapo_trl.trainer.resilience.checkpoint import set_aside_checkpoints


@pytest.fixture
def run_dir(tmp_path):
    """checkpoint-1 whole, checkpoint-2 cut mid-write, checkpoint-3 without its state."""
    for step, state in ((1, '{"global_step": 1}'), (2, '{"global_st'), (3, None)):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        if state is not None:
            (folder / "trainer_state.json").write_text(state)
    return tmp_path


@pytest.mark.parametrize("argv", [["--resume_from_checkpoint"], ["--resume_from_checkpoint", "true"],
                                  ["--resume_from_checkpoint", "--max_steps", "3"]])
def test_the_bare_flag_and_true_resume_from_the_newest_whole_checkpoint(run_dir, argv):
    _, fast, _ = read_recipe("train", argv)
    _, args, _ = parse_recipe("train", [*argv, "--output_dir", str(run_dir)])
    assert fast.resume_from_checkpoint == args.resume_from_checkpoint == "true"
    assert resume_from(args.resume_from_checkpoint, args.output_dir) == str(run_dir / "checkpoint-1")


def test_unset_refuses_to_start_over_an_earlier_runs_checkpoints(run_dir, tmp_path):
    with pytest.raises(UsageError, match=r"holds checkpoint-1 of an earlier run: pass --resume_from_checkpoint to go "
                                         r"on .*, or --resume_from_checkpoint false to train from the start"):
        resume_from(None, str(run_dir))
    half = tmp_path / "half"
    (half / "checkpoint-4").mkdir(parents=True)  # a save cut before its trainer_state.json: nothing to go on from
    assert resume_from(None, str(half)) is None and resume_from(None, str(tmp_path / "new")) is None


def test_nothing_to_resume_from_is_refused_in_one_line(tmp_path):
    with pytest.raises(UsageError, match="holds no whole checkpoint to resume from"):
        resume_from("true", str(tmp_path))
    with pytest.raises(UsageError, match="resume_from_checkpoint 'runs/x/checkpoint-9' is not a folder"):
        resume_from("runs/x/checkpoint-9", str(tmp_path))


def test_a_half_written_checkpoint_is_refused_without_a_resuming_line(run_dir, caplog):
    with caplog.at_level(logging.INFO):
        with pytest.raises(UsageError, match="checkpoint-3 is not a whole checkpoint.*earlier one: .*checkpoint-1"):
            resume_from(str(run_dir / "checkpoint-3"), str(run_dir))
    assert "resuming from" not in caplog.text


@pytest.mark.parametrize("false", ["false", False])
def test_false_resumes_nothing_and_leaves_the_earlier_runs_checkpoints_to_the_trainer(run_dir, false):
    """RAPOTrainer.train moves them aside when it starts without a checkpoint, from the CLI and Python alike
    (tests/trainer/test_checkpoint_overwrite.py)."""
    assert resume_from(false, str(run_dir)) is None
    assert sorted(path.name for path in run_dir.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2",
                                                                          "checkpoint-3"]


def test_an_earlier_runs_checkpoints_are_set_aside_whole(run_dir, caplog):
    """Left in place, the earlier run's checkpoint-3 would outrank the new run's checkpoint-1 for a bare resume, and
    save_total_limit would rotate away some of either run's checkpoints."""
    with caplog.at_level(logging.WARNING):
        aside = Path(set_aside_checkpoints(str(run_dir)))
    assert aside.parent == run_dir and aside.name.startswith("earlier-run-")
    assert sorted(path.name for path in aside.iterdir()) == ["checkpoint-1", "checkpoint-2", "checkpoint-3"]
    assert (aside / "checkpoint-1" / "trainer_state.json").read_text() == '{"global_step": 1}'
    assert not list(run_dir.glob("checkpoint-*")) and str(aside) in caplog.text
    with pytest.raises(UsageError, match="holds no whole checkpoint to resume from"):
        resume_from("true", str(run_dir))
    assert resume_from(None, str(run_dir)) is None  # nothing left that an unset flag would start over
    assert set_aside_checkpoints(str(run_dir)) is None  # nothing to move
    (run_dir / "checkpoint-1").mkdir()
    assert set_aside_checkpoints(str(run_dir)) is not None
    assert len(list(run_dir.glob("earlier-run-*"))) == 2  # a second start over keeps the first one's set apart


def _checkpoint(run_dir: Path, step: int, run_id: str | None, saved_at: float | None) -> Path:
    """A whole checkpoint as RAPOTrainer saves one for `rapo train` run ``run_id``, at ``saved_at``."""
    folder = run_dir / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    state = {"engine": {}, "run": f"growth-{run_id}", "run_id": run_id}
    if saved_at is not None:
        state["saved_at"] = saved_at
    (folder / "rapo_state_0.json").write_text(json.dumps(state))
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))
    return folder


def _record(run_dir: Path, run_id: str) -> None:
    (run_dir / RUN_RECORD).write_text(json.dumps({"task": "gsm8k", "tools": [], "run_id": run_id}))


@pytest.mark.parametrize("earlier_saved_at", [None, 3000.0], ids=["no-saved-at", "earlier-run-clock-ahead"])
def test_the_bare_flag_resumes_the_latest_checkpoint_of_the_recorded_run(tmp_path, earlier_saved_at, caplog):
    """Run A reached checkpoint-20; run B, started over in the same output_dir (and its record), is at checkpoint-5.
    By step, or by a saved_at from a clock that ran ahead, A's checkpoint-20 would be taken: another run."""
    _checkpoint(tmp_path, 20, "run-a", earlier_saved_at)
    _checkpoint(tmp_path, 3, "run-b", 1000.0)
    _checkpoint(tmp_path, 5, "run-b", 1100.0)
    _record(tmp_path, "run-b")
    with caplog.at_level(logging.WARNING):
        assert resume_from("true", str(tmp_path)) == str(tmp_path / "checkpoint-5")
    assert "checkpoint-20" in caplog.text  # the higher-numbered one passed over is named
    assert checkpoint_saved_last(str(tmp_path)) == str(tmp_path / "checkpoint-5")  # what `rapo plot` draws


def test_the_bare_flag_refuses_another_runs_checkpoints_naming_both_runs(tmp_path):
    """Run B started over and stopped before its first checkpoint, with run A's still beside its record."""
    _checkpoint(tmp_path, 20, "run-a", 1000.0)
    _record(tmp_path, "run-b")
    with pytest.raises(UsageError, match=r"run run-b, which saved no checkpoint there; .*run run-a .*checkpoint-20"):
        resume_from("true", str(tmp_path))


def test_checkpoints_of_one_run_and_unstamped_ones_resume_as_before(tmp_path):
    """Checkpoints saved from Python or before runs stamped their id: a bare resume takes the one saved last."""
    _checkpoint(tmp_path, 20, None, 1000.0)
    _checkpoint(tmp_path, 5, None, 2000.0)
    _record(tmp_path, "run-b")
    assert resume_from("true", str(tmp_path)) == str(tmp_path / "checkpoint-5")
    _checkpoint(tmp_path, 10, "run-b", 3000.0)  # the recorded run resumed after an upgrade
    assert resume_from("true", str(tmp_path)) == str(tmp_path / "checkpoint-10")


def test_a_resumed_run_keeps_the_id_its_checkpoint_was_saved_under(tmp_path):
    """Resuming run A's checkpoint by name continues run A, wherever the checkpoint lies: in output_dir beside run
    B's record, or set aside into earlier-run-<time> when B started over."""
    in_place = _checkpoint(tmp_path, 20, "run-a", 1000.0)
    aside = _checkpoint(tmp_path / "earlier-run-20260101-000000", 20, "run-a", 1000.0)
    _record(tmp_path, "run-b")
    assert run_id_for(str(tmp_path), str(in_place)) == "run-a"
    assert run_id_for(str(tmp_path), str(aside)) == "run-a"
    assert run_id_for(str(tmp_path), str(_checkpoint(tmp_path, 25, None, 2000.0))) == "run-b"  # saved unstamped
    assert run_id_for(str(tmp_path), None) not in ("run-a", "run-b")
