"""`rapo train` leaves plots and RAPO's model card beside the model; `rapo plot RUN` redraws the plots."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.runs import describe, rapo


@pytest.mark.rapo_runs("train-lora")
def test_train_writes_plots_history_and_the_rapo_card(cli_runs, cli_work):
    _, base = cli_work
    run = cli_runs["train-lora"]
    assert run.returncode == 0, describe(run)
    out = Path(base["output_dir"])
    assert (out / "trainer_state.json").is_file()
    for name in ("reward.png", "retrieval_rate.png", "summary.png"):
        assert (out / "plots" / name).is_file(), describe(run)
    assert f"rapo plot {out}" in run.stdout
    card = (out / "README.md").read_text()
    assert "## RAPO recipe" in card and "Siwei Zhang" in card and "| `retrieve_prob` | 1.0 |" in card
    assert "[More Information Needed]" not in card  # PEFT's empty template is gone


@pytest.mark.rapo_runs("train-lora")
def test_rapo_plot_redraws_from_the_logged_history(cli_runs, cli_work, tmp_path):
    _, base = cli_work
    assert cli_runs["train-lora"].returncode == 0
    run = rapo("plot", base["output_dir"], "--out", tmp_path / "again")
    assert run.returncode == 0, describe(run)
    assert (tmp_path / "again" / "summary.png").is_file()
    assert str(tmp_path / "again" / "reward.png") in run.stdout


def test_rapo_plot_on_a_folder_without_history_is_one_line(tmp_path):
    run = rapo("plot", tmp_path)
    assert run.returncode == 2
    assert run.stderr.startswith("rapo plot: error: no trainer_state.json") and run.stderr.count("\n") == 1
