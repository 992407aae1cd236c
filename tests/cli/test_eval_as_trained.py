"""`rapo eval` evaluates the agent that was trained: the run's recorded tools by default, a warning when the command
names others, and a model it cannot evaluate as trained (an environment, JSON tool calls) refused in one line."""

from __future__ import annotations

import json
import logging
import shutil

import pytest

from rapo_trl.cli import evaluate, parse_recipe
from rapo_trl.cli.common import UsageError
from rapo_trl.cli.run_record import RUN_RECORD, write_run_record
from tests.helpers.user_modules import import_fresh

MY_TOOLS = '''
def unit_price(total: float, count: int) -> float:
    """The price of one item when `count` items cost `total`.

    Args:
        total: what all the items cost together
        count: how many items there are
    """
    return total / count
'''


@pytest.fixture
def trained(tmp_path, tiny_model_dir, monkeypatch):
    """A model folder as `rapo train` leaves it (the tiny model, and the record of its tools), and the data."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    import_fresh(monkeypatch, "my_tools")
    (tmp_path / "my_tools.py").write_text(MY_TOOLS)
    (tmp_path / "qa.jsonl").write_text("".join(json.dumps({"question": f"What is {i} + 1?", "answer": str(i + 1)})
                                               + "\n" for i in range(6)))
    run = tmp_path / "run"
    shutil.copytree(tiny_model_dir, run)
    write_run_record(str(run), ["python", "my_tools.unit_price"], "tags", None, "dataset")
    return run


def _eval(run, *overrides):
    argv = ["--task", "dataset", "--dataset_path", "qa.jsonl", "--eval_fraction", "0.34", "--eval_model", str(run),
            "--eval_base", "false", "--max_completion_length", "4", "--max_turn_tokens", "4", *overrides]
    return parse_recipe("eval", argv)


def test_eval_uses_the_tools_the_run_trained_with_and_records_them(trained):
    evaluate.run(*_eval(trained))
    saved = json.loads((trained / "eval_results.json").read_text())
    assert (saved["tools"], saved["tool_protocol"]) == (["python", "my_tools.unit_price"], "tags")


def test_eval_with_other_tools_warns_and_records_the_ones_it_used(trained, caplog):
    with caplog.at_level(logging.WARNING, logger="rapo_trl.cli"):
        evaluate.run(*_eval(trained, "--tools", "python"))
    assert any("evaluating with tools ['python'], but" in r.getMessage()
               and "was trained with ['python', 'my_tools.unit_price']" in r.getMessage() for r in caplog.records)
    assert json.loads((trained / "eval_results.json").read_text())["tools"] == ["python"]


def test_eval_refuses_an_environment_given_or_trained_with(trained):
    script, rapo_args, model_args = _eval(trained, "--environment_factory", "my_tools.Calculator")
    with pytest.raises(UsageError, match="rapo eval does not evaluate a model with an environment yet "
                                         r"\(--environment_factory my_tools.Calculator\)"):
        evaluate.check(script, rapo_args, model_args)
    write_run_record(str(trained), [], "json", "my_env.Calculator", "dataset")
    with pytest.raises(UsageError, match="was trained on environment_factory my_env.Calculator"):
        evaluate.check(*_eval(trained))


def test_eval_refuses_a_model_trained_with_json_tool_calls(trained):
    record = json.loads((trained / RUN_RECORD).read_text())
    (trained / RUN_RECORD).write_text(json.dumps({**record, "tool_protocol": "json"}))
    with pytest.raises(UsageError, match="trained calling tools as json tool calls; rapo eval runs tools in tags"):
        evaluate.check(*_eval(trained))


def test_eval_refuses_an_eval_set_holding_questions_the_run_trained_on(tmp_path, tiny_model_dir, monkeypatch):
    """GSM8K trains on the rows after the first eval_size: an eval_size larger than training's would ask the
    trained questions; refused before a model loads."""
    from rapo_trl.cli import model_scoring
    from rapo_trl.cli.common import load_questions

    run = tmp_path / "run"
    shutil.copytree(tiny_model_dir, run)
    training = parse_recipe("train", ["--task", "gsm8k"])[0]
    write_run_record(str(run), ["python"], "tags", None, "gsm8k",
                     trained_questions=load_questions(training, "train")["question"])
    monkeypatch.setattr(model_scoring, "load_policy", lambda *a, **k: pytest.fail("a model loaded"))
    with pytest.raises(UsageError, match=r"eval set 'eval' holds 64 of its 200 questions that .* trained on"):
        evaluate.run(*parse_recipe("eval", ["--task", "gsm8k", "--eval_size", "200", "--eval_model", str(run),
                                            "--eval_base", "false"]))


def test_eval_with_training_data_settings_is_not_refused_and_another_seed_is(trained):
    from rapo_trl.cli.common import load_questions

    script = parse_recipe("train", ["--task", "dataset", "--dataset_path", "qa.jsonl", "--eval_fraction", "0.34"])[0]
    write_run_record(str(trained), ["python"], "tags", None, "dataset",
                     trained_questions=load_questions(script, "train")["question"])
    evaluate.run(*_eval(trained))
    with pytest.raises(UsageError, match="trained on"):
        evaluate.run(*_eval(trained, "--task_seed", "7"))


def test_an_eval_question_trained_on_in_another_spacing_or_case_is_refused(trained):
    """An eval file exported again (a trailing space, another case) asks the questions the run trained on."""
    write_run_record(str(trained), ["python"], "tags", None, "dataset", trained_questions=["What is 1 + 1?"])
    (trained.parent / "eval.jsonl").write_text(json.dumps({"question": "what is 1 +  1? ", "answer": "2"}) + "\n")
    with pytest.raises(UsageError, match="eval set 'eval' holds 1 of its 1 questions that .* trained on"):
        evaluate.run(*parse_recipe("eval", ["--task", "dataset", "--dataset_path", "qa.jsonl", "--eval_dataset_path",
                                            "eval.jsonl", "--eval_model", str(trained), "--eval_base", "false",
                                            "--max_completion_length", "4", "--max_turn_tokens", "4"]))


def test_eval_says_which_tools_a_folder_without_a_run_record_is_scored_with(trained, capsys):
    (trained / RUN_RECORD).unlink()  # a model trained from Python
    evaluate.run(*_eval(trained))
    assert f"{trained} holds no {RUN_RECORD} (`rapo train` writes one): evaluating with the task's tools" in (
        capsys.readouterr().out)


def test_eval_on_another_task_than_the_run_trained_on_warns(trained, caplog):
    write_run_record(str(trained), ["python"], "tags", None, "arithmetic")
    with caplog.at_level(logging.WARNING, logger="rapo_trl.cli"):
        evaluate.run(*_eval(trained))
    assert any("was trained on task 'arithmetic' and is evaluated on 'dataset'" in r.getMessage()
               for r in caplog.records)


def test_a_sampled_model_that_is_not_scored_is_named(trained, caplog):
    with caplog.at_level(logging.WARNING, logger="rapo_trl.cli"):
        evaluate.run(*_eval(trained, "--eval_samples", "2", "--eval_sampled_models", "base", "trained"))
    assert any("eval_sampled_models names ['base'], which this evaluation does not score" in r.getMessage()
               for r in caplog.records)
