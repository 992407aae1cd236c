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
