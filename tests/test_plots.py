"""Plots drawn from a TRL log history: which files appear, what they hold, and clear errors."""

import json

import pytest

from rapo_trl.plots import evaluation_rows, load_log_history, pass_at_1_keys, plot_history, plot_run, series

HISTORY = [
    {"step": 1, "loss": 0.1, "reward": -1.0, "reward_std": 0.2, "rapo/retrieval_rate": 0.5,
     "rapo/fallback_rate": 0.0, "rapo/z_mean": 0.1, "rapo/z_std": 0.05, "rapo/f_ret_mean": 0.2},
    {"step": 2, "loss": 0.2, "reward": -0.5, "reward_std": 0.4, "rapo/retrieval_rate": 1.0,
     "rapo/fallback_rate": 0.25, "rapo/z_mean": float("nan"), "rapo/f_ret_mean": 0.3},
    {"step": 2, "eval_pass@1": 0.25},
    {"step": 2, "train_runtime": 3.0},
]


def _png(path):
    from PIL import Image

    with Image.open(path) as image:
        assert image.format == "PNG"
        return image.size


def test_series_skips_missing_and_non_finite_values():
    assert series(HISTORY, "reward") == ([1, 2], [-1.0, -0.5])
    assert series(HISTORY, "rapo/z_mean") == ([1], [0.1])
    assert pass_at_1_keys(HISTORY) == ["eval_pass@1"]


def test_every_quantity_gets_a_png_and_a_summary(tmp_path):
    written = plot_history(HISTORY, tmp_path)
    names = [p.name for p in written]
    assert names == ["reward.png", "pass_at_1.png", "retrieval_rate.png", "retrieval_reward.png", "f_ret.png",
                     "summary.png"]
    width, height = _png(tmp_path / "summary.png")
    single_width, _ = _png(tmp_path / "reward.png")
    assert width > 4 * single_width  # five panels side by side


def test_quantities_never_logged_get_no_file(tmp_path):
    written = plot_history([{"step": 1, "reward": 0.5}, {"step": 2, "reward": 0.7}], tmp_path)
    assert [p.name for p in written] == ["reward.png", "summary.png"]


def test_nothing_to_draw_is_one_clear_error(tmp_path):
    with pytest.raises(ValueError, match="none of the plotted metrics"):
        plot_history([{"step": 1, "loss": 0.3}], tmp_path)


def test_plot_run_reads_the_latest_checkpoint_and_eval_results(tmp_path):
    for step, history in ((1, HISTORY[:1]), (2, HISTORY[:2])):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        (folder / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    assert [e["step"] for e in load_log_history(tmp_path)] == [1, 2]  # checkpoint-2, not checkpoint-1
    (tmp_path / "eval_results.json").write_text(
        json.dumps({"n": 8, "results": {"base": {"pass@1": 0.0}, "trained": {"pass@1": 0.5}}})
    )
    names = [p.name for p in plot_run(tmp_path)]
    assert "pass_at_1.png" in names  # from rapo eval's base/trained scores alone
    (tmp_path / "eval_results.json").write_text(json.dumps({"rows": {"warm_start": {"pass@1": 0.5}}}))
    assert evaluation_rows(json.loads((tmp_path / "eval_results.json").read_text())) == {
        "warm_start": {"pass@1": 0.5}}
    assert "pass_at_1.png" in [p.name for p in plot_run(tmp_path, tmp_path / "again")]
    assert (tmp_path / "plots" / "summary.png").is_file()


def test_a_stopped_runs_plots_leave_out_the_earlier_models_eval_results(tmp_path, caplog):
    # The stopped run's history comes from its checkpoint; the eval results beside it scored the model an earlier
    # run saved in the same folder, so drawing them would show that model's pass@1 as this run's.
    folder = tmp_path / "checkpoint-2"
    folder.mkdir()
    (folder / "trainer_state.json").write_text(json.dumps({"log_history": HISTORY[:2]}))
    (tmp_path / "eval_results.json").write_text(json.dumps({"n": 8, "rows": {"trained": {"pass@1": 0.9}}}))
    (tmp_path / "rapo_run.json").write_text(json.dumps({"task": "arithmetic", "finished": False}))
    with caplog.at_level("WARNING", logger="rapo_trl.plots"):
        names = [p.name for p in plot_run(tmp_path)]
    assert "pass_at_1.png" not in names and "reward.png" in names
    assert "eval_results.json is left out of the plots" in caplog.text
    (tmp_path / "rapo_run.json").write_text(json.dumps({"task": "arithmetic", "finished": True}))
    assert "pass_at_1.png" in [p.name for p in plot_run(tmp_path, tmp_path / "finished")]


def test_missing_or_wrong_run_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="trainer_state.json"):
        load_log_history(tmp_path)
    bad = tmp_path / "trainer_state.json"
    bad.write_text("{}")
    with pytest.raises(ValueError, match="no log_history"):
        load_log_history(bad)


def _state(folder, history, global_step, mtime=None):
    import os

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "trainer_state.json"
    path.write_text(json.dumps({"global_step": global_step, "log_history": history}))
    if mtime is not None:
        os.utime(path, (mtime, mtime))


STEPS = [{"step": step, "reward": step / 10} for step in range(1, 5)]


def test_a_run_resumed_past_its_saved_history_is_drawn_from_its_newer_checkpoint(tmp_path, caplog):
    # Trained to step 2 (trainer_state.json beside the model), then resumed for more and stopped at checkpoint-4:
    # the folder's own file is the shorter run's, and would silently draw half of the run.
    _state(tmp_path, [*STEPS[:2], {"step": 2, "train_runtime": 3.0}], 2, mtime=1_000)
    _state(tmp_path / "checkpoint-2", STEPS[:2], 2, mtime=900)
    _state(tmp_path / "checkpoint-4", STEPS, 4, mtime=2_000)
    with caplog.at_level("WARNING", logger="rapo_trl.plots"):
        assert [e["step"] for e in load_log_history(tmp_path) if "reward" in e] == [1, 2, 3, 4]
    assert "checkpoint-4" in caplog.text


def test_a_run_started_over_is_drawn_from_its_own_checkpoint_not_the_earlier_runs_history(tmp_path, caplog):
    earlier = [{"step": step, "reward": -1.0} for step in range(1, 7)]
    _state(tmp_path, earlier, 6, mtime=1_000)  # the earlier run's, left beside the model by its end
    _state(tmp_path / "checkpoint-2", STEPS[:2], 2, mtime=2_000)  # this run's, saved since
    with caplog.at_level("WARNING", logger="rapo_trl.plots"):
        assert load_log_history(tmp_path) == STEPS[:2]
    assert "checkpoint-2" in caplog.text


def test_a_finished_runs_history_is_drawn_whatever_its_checkpoints_dates(tmp_path, caplog):
    # A folder copied without its dates can show a checkpoint written after the final state: same run, fewer steps.
    _state(tmp_path, [*STEPS, {"step": 4, "train_runtime": 3.0}], 4, mtime=1_000)
    _state(tmp_path / "checkpoint-2", STEPS[:2], 2, mtime=2_000)
    with caplog.at_level("WARNING", logger="rapo_trl.plots"):
        assert len(load_log_history(tmp_path)) == 5
    assert caplog.text == ""


def _saved_at(folder, saved_at):
    """RAPO's state of a checkpoint, as far as the choice of the one saved last reads it."""
    (folder / "rapo_state_0.json").write_text(json.dumps({"saved_at": saved_at}))


def test_a_folder_without_its_own_state_is_drawn_from_the_checkpoint_saved_last_not_the_highest(tmp_path, caplog):
    # An earlier run stopped at checkpoint-6; a run resumed from its checkpoint-2 saved checkpoint-3 since and stopped:
    # by number the earlier run's checkpoint-6 would be drawn, a history that is not the latest run's.
    earlier = [{"step": step, "reward": -1.0} for step in range(1, 7)]
    _state(tmp_path / "checkpoint-6", earlier, 6)
    _saved_at(tmp_path / "checkpoint-6", 1_000.0)
    _state(tmp_path / "checkpoint-3", STEPS[:3], 3)
    _saved_at(tmp_path / "checkpoint-3", 2_000.0)
    with caplog.at_level("WARNING", logger="rapo_trl.plots"):
        assert load_log_history(tmp_path) == STEPS[:3]
    assert "checkpoint-3" in caplog.text and "checkpoint-6" in caplog.text


def test_a_folder_with_its_own_state_compares_it_with_the_checkpoint_saved_last(tmp_path, caplog):
    # A run that ended at step 6 (its state beside the model) was resumed from checkpoint-2 and saved checkpoint-3:
    # checkpoint-6, the highest, is the finished run's own and would hide the resumed run's history.
    earlier = [{"step": step, "reward": -1.0} for step in range(1, 7)]
    _state(tmp_path, earlier, 6, mtime=1_000)
    _state(tmp_path / "checkpoint-6", earlier, 6, mtime=1_000)
    _saved_at(tmp_path / "checkpoint-6", 1_000.0)
    _state(tmp_path / "checkpoint-3", [*earlier[:2], {"step": 3, "reward": 0.3}], 3, mtime=2_000)
    _saved_at(tmp_path / "checkpoint-3", 2_000.0)
    with caplog.at_level("WARNING", logger="rapo_trl.plots"):
        assert [e["reward"] for e in load_log_history(tmp_path)] == [-1.0, -1.0, 0.3]
    assert "checkpoint-3" in caplog.text


def test_checkpoints_without_rapo_state_are_taken_by_their_step(tmp_path):
    _state(tmp_path / "checkpoint-2", STEPS[:2], 2, mtime=2_000)  # e.g. a GRPO baseline's: no saved_at to go by
    _state(tmp_path / "checkpoint-4", STEPS, 4, mtime=1_000)
    assert load_log_history(tmp_path) == STEPS
