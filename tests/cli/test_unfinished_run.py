"""A run that stopped before it saved its model, in an output_dir where an earlier run finished: the model there is
the earlier run's, beside the stopped run's record, and `rapo eval` refuses to score it as the recorded run's."""

from __future__ import annotations

import re

import pytest

from rapo_trl.cli import evaluate, parse_recipe, train
from rapo_trl.cli.common import UsageError
from rapo_trl.trainer import RAPOTrainer
from tests.cli.conftest import recipe, write_yaml


class Stopped(Exception):
    """The run dies (an exception, a kill) before it saves its model."""


def _recipe(tiny_model_dir, tmp_path, **changes):
    config = {**recipe(tiny_model_dir, tmp_path), "output_dir": str(tmp_path / "model"), "retrieve_prob": 0.0,
              **changes}
    return str(write_yaml(tmp_path / "r.yaml", config))


def _stop_before_the_model_is_saved(monkeypatch):
    saved = RAPOTrainer.save_model

    def save_model(self, output_dir=None, _internal_call=False):
        if not _internal_call:  # a checkpoint's save goes through; the run's model does not
            raise Stopped
        return saved(self, output_dir, _internal_call)

    monkeypatch.setattr(RAPOTrainer, "save_model", save_model)


def test_eval_refuses_the_earlier_runs_model_beside_a_run_that_stopped_before_saving(tiny_model_dir, tmp_path,
                                                                                      monkeypatch):
    config = _recipe(tiny_model_dir, tmp_path)
    train.run(*parse_recipe("train", ["--config", config]))
    evaluate.check(*parse_recipe("eval", ["--config", config]))  # a finished run is scored

    # the same output_dir, another recipe, nothing saved until the end (save_strategy no): it dies first
    _stop_before_the_model_is_saved(monkeypatch)
    with pytest.raises(Stopped):
        train.run(*parse_recipe("train", ["--config", config, "--learning_rate", "0.5"]))
    with pytest.raises(UsageError, match=rf"{re.escape(str(tmp_path / 'model'))}: the run .* did not finish.*"
                                         "an earlier run's"):
        evaluate.check(*parse_recipe("eval", ["--config", config]))


def test_a_stopped_runs_checkpoint_and_the_run_resumed_to_its_end_are_scored(tiny_model_dir, tmp_path, monkeypatch):
    config = _recipe(tiny_model_dir, tmp_path, save_strategy="steps", save_steps=1)
    with monkeypatch.context() as patched:
        _stop_before_the_model_is_saved(patched)
        with pytest.raises(Stopped):
            train.run(*parse_recipe("train", ["--config", config]))
    evaluate.check(*parse_recipe("eval", ["--config", config, "--eval_model", str(tmp_path / "model" /
                                                                                  "checkpoint-1")]))
    train.run(*parse_recipe("train", ["--config", config, "--resume_from_checkpoint", "--max_steps", "2"]))
    evaluate.check(*parse_recipe("eval", ["--config", config]))


def test_the_refusal_names_the_stopped_runs_newest_checkpoint(tiny_model_dir, tmp_path):
    import shutil

    from rapo_trl.cli.run_record import write_run_record

    run = tmp_path / "model"
    shutil.copytree(tiny_model_dir, run)  # an earlier run's model
    write_run_record(str(run), ["python"], "tags", None, "arithmetic", run_id="stopped", finished=False)
    (run / "checkpoint-3").mkdir()
    (run / "checkpoint-3" / "trainer_state.json").write_text("{}")  # whole: the stopped run saved it
    with pytest.raises(UsageError, match=rf"\(run stopped\) did not finish.*give --eval_model "
                                         rf"{re.escape(str(run / 'checkpoint-3'))} \(its newest checkpoint\)"):
        evaluate.check(*parse_recipe("eval", ["--eval_model", str(run), "--eval_base", "false"]))


def test_push_refuses_the_earlier_runs_model_beside_a_run_that_stopped(tiny_model_dir, tmp_path):
    """`rapo push` would upload the earlier run's weights under the stopped run's recorded base and card."""
    import shutil

    from rapo_trl.cli.push import push_run
    from rapo_trl.cli.run_record import write_run_record

    run = tmp_path / "model"
    shutil.copytree(tiny_model_dir, run)  # an earlier run's model
    write_run_record(str(run), ["python"], "tags", None, "arithmetic", run_id="stopped", finished=False)
    (run / "checkpoint-3").mkdir()
    (run / "checkpoint-3" / "trainer_state.json").write_text("{}")
    with pytest.raises(UsageError, match=rf"\(run stopped\) did not finish.*push "
                                         rf"{re.escape(str(run / 'checkpoint-3'))} \(its newest checkpoint\)"):
        push_run(run, "someone/model", api=object())  # refused before anything reaches the Hub
