"""`rapo eval` says how many questions it asks and records which (their ids) in eval_results.json."""

from __future__ import annotations

import json
import re

import pytest

from rapo_trl.cli import evaluate, parse_recipe
from rapo_trl.cli.common import load_questions


def test_eval_prints_its_count_and_records_the_question_ids(tmp_path, capsys):
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n"
                            for i in range(10)))
    argv = ["--task", "dataset", "--dataset_path", str(data), "--eval_fraction", "0.3", "--eval_model", "tiny",
            "--eval_base", "false", "--output_dir", str(tmp_path / "out"), "--max_completion_length", "4",
            "--max_turn_tokens", "4", "--eval_report", str(tmp_path / "report.json")]
    script, rapo_args, model_args = parse_recipe("eval", argv)
    evaluate.run(script, rapo_args, model_args)
    out = capsys.readouterr().out
    assert "Evaluating on 3 questions (task=dataset, eval: 3; every row; eval_size caps them)" in out
    saved = json.loads((tmp_path / "report.json").read_text())
    asked = list(load_questions(script, "eval")["question_id"])
    assert saved["question_ids"] == asked and saved["sets"]["eval"]["question_ids"] == asked


def test_eval_scores_every_model_train_left_beside_the_trained_one(tmp_path):
    """SFT on the store (`sft_store_steps`) is scored as a model of its own, in the order the runs were made."""
    target = tmp_path / "out"
    for folder in ("sft-warm-start", "sft-on-store", "grpo-same-rollouts"):
        (target / folder).mkdir(parents=True)
        (target / folder / "adapter_config.json").write_text("{}")
    (target / "sft-same-time").mkdir()  # no adapter in it: a run stopped before it was saved is not scored
    script, _, model_args = parse_recipe("eval", ["--eval_model", str(target), "--eval_base", "false"])
    models = evaluate.models_to_evaluate(script, model_args, str(target))
    assert models == {"warm_start": str(target / "sft-warm-start"), "sft_on_store": str(target / "sft-on-store"),
                      "grpo_same_rollouts": str(target / "grpo-same-rollouts"), "trained": str(target)}
    assert list(models) == [name for name in evaluate.MODEL_NAMES if name in models]


def test_eval_models_scores_the_models_named_in_scoring_order_and_refuses_an_unknown_name(tmp_path):
    from rapo_trl.cli.errors import UsageError

    target = tmp_path / "out"
    for folder in ("sft-warm-start", "sft-on-store", "grpo-same-rollouts"):
        (target / folder).mkdir(parents=True)
        (target / folder / "adapter_config.json").write_text("{}")
    argv = ["--eval_model", str(target), "--eval_base", "false", "--eval_models", "trained", "warm_start"]
    script, _, model_args = parse_recipe("eval", argv)
    assert evaluate.models_to_evaluate(script, model_args, str(target)) == {
        "warm_start": str(target / "sft-warm-start"), "trained": str(target)}
    script, _, _ = parse_recipe("eval", [*argv, "trained_model"])
    with pytest.raises(UsageError, match="eval_models names 'trained_model', not one of base, .*would be scored"):
        evaluate.check_sampling_settings(script)


def test_models_scored_in_processes_score_as_they_do_one_after_another(tiny_model_dir, tmp_path, capsys):
    """eval_processes 2: two models, each in a spawned process, give the scores and texts (greedy and sampled) the
    models give one after another in this process, at the same torch thread count."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = tmp_path / "out"
    shutil.copytree(tiny_model_dir, target)
    warm_start = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    torch.manual_seed(1)
    with torch.no_grad():  # another model than the trained one, so the two processes' texts differ
        for parameter in warm_start.parameters():
            parameter.add_(0.5 * torch.randn_like(parameter))
    warm_start.save_pretrained(target / "sft-warm-start")
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(target / "sft-warm-start")
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n"
                            for i in range(12)))
    reports = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the workers get 1 // 2 -> 1 thread each: the same kernels as here
    try:
        for processes in (1, 2):
            argv = ["--task", "dataset", "--dataset_path", str(data), "--eval_fraction", "0.5", "--eval_model",
                    str(target), "--eval_base", "false", "--max_completion_length", "12", "--max_turn_tokens", "12",
                    "--eval_samples", "2", "--eval_batch_size", "4", "--eval_processes", str(processes),
                    "--eval_report", str(tmp_path / f"report-{processes}.json")]
            evaluate.run(*parse_recipe("eval", argv))
            reports[processes] = json.loads((tmp_path / f"report-{processes}.json").read_text())
    finally:
        torch.set_num_threads(threads)
    assert "Scoring 2 models in 2 processes, 1 torch thread(s) each." in capsys.readouterr().out
    one_by_one, in_processes = reports[1], reports[2]
    assert list(in_processes["rows"]) == ["warm_start", "trained"]
    assert in_processes["samples"] == one_by_one["samples"]
    assert in_processes["samples"]["warm_start"] != in_processes["samples"]["trained"]
    for model in ("warm_start", "trained"):
        scores = {key: value for key, value in one_by_one["rows"][model].items() if key != "seconds"}
        assert "mean@k" in scores and "pass@1" in scores
        assert {key: value for key, value in in_processes["rows"][model].items() if key != "seconds"} == scores


def test_eval_table_says_mean_at_k_is_over_fewer_questions_than_pass_at_1(tmp_path, capsys):
    """eval_sample_size below the set's size: the table's title names the questions mean@k is over, which the
    report's per-question passes count."""
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n"
                            for i in range(10)))
    argv = ["--task", "dataset", "--dataset_path", str(data), "--eval_fraction", "0.3", "--eval_model", "tiny",
            "--eval_base", "false", "--max_completion_length", "4", "--max_turn_tokens", "4", "--eval_samples", "2",
            "--eval_temperature", "1.0", "--eval_report", str(tmp_path / "report.json")]
    evaluate.run(*parse_recipe("eval", [*argv, "--eval_sample_size", "2"]))
    assert "| model (dataset, eval, n=3, mean@2 of the first 2 at T=1.0) |" in capsys.readouterr().out
    trained = json.loads((tmp_path / "report.json").read_text())["rows"]["trained"]
    assert trained["n"] == 3 and len(trained["sampled_correct_by_question"]) == trained["questions"] == 2
    evaluate.run(*parse_recipe("eval", [*argv, "--eval_sample_size", "3"]))
    assert "| model (dataset, eval, n=3, mean@2 at T=1.0) |" in capsys.readouterr().out


def test_eval_samples_mean_at_k_with_the_recipes_top_p_and_top_k(tmp_path, capsys):
    """mean@k samples as the recipe's training does: its top_p and top_k, recorded with the scores and named in the
    table's title (which names only the temperature while they are at their defaults)."""
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n"
                            for i in range(10)))
    argv = ["--task", "dataset", "--dataset_path", str(data), "--eval_fraction", "0.3", "--eval_model", "tiny",
            "--eval_base", "false", "--max_completion_length", "4", "--max_turn_tokens", "4", "--eval_samples", "2",
            "--temperature", "0.8", "--top_p", "0.9", "--top_k", "20", "--eval_report", str(tmp_path / "report.json")]
    evaluate.run(*parse_recipe("eval", argv))
    assert "| model (dataset, eval, n=3, mean@2 at T=0.8, top_p=0.9, top_k=20) |" in capsys.readouterr().out
    trained = json.loads((tmp_path / "report.json").read_text())["rows"]["trained"]
    assert (trained["temperature"], trained["top_p"], trained["top_k"]) == (0.8, 0.9, 20)
    assert (trained["min_p"], trained["repetition_penalty"]) == (None, 1.0)


def test_eval_scores_a_question_repeated_in_the_eval_data_once(tmp_path, capsys):
    """A question the eval file holds twice is scored once: the report's n and question ids are the distinct
    questions', which its per-question passes pair with, and so are the counts eval prints."""
    train, held = tmp_path / "train.jsonl", tmp_path / "eval.jsonl"
    train.write_text("".join(json.dumps({"question": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n"
                             for i in range(4)))
    held.write_text("".join(json.dumps({"question": f"What is {i} + 2?", "answer": str(i + 2)}) + "\n"
                            for i in (10, 11, 10)))
    argv = ["--task", "dataset", "--dataset_path", str(train), "--eval_dataset_path", str(held), "--eval_model",
            "tiny", "--eval_base", "false", "--max_completion_length", "4", "--max_turn_tokens", "4",
            "--eval_samples", "2", "--eval_report", str(tmp_path / "report.json")]
    with pytest.warns(UserWarning, match="1 repeated question of 3 rows dropped"):
        evaluate.run(*parse_recipe("eval", argv))
    out = capsys.readouterr().out
    # the questions counted where eval says how many it asks and asked: the 2 scored, not the 3 rows
    assert "Evaluating on 2 questions (task=dataset, eval: 2;" in out
    assert re.search(r"Evaluated 1 models on 1 sets \(eval: 2 questions\)", out)
    report = json.loads((tmp_path / "report.json").read_text())
    trained = report["rows"]["trained"]
    assert trained["n"] == trained["questions"] == 2 and trained["duplicate_questions_dropped"] == 1
    assert report["n"] == report["sets"]["eval"]["n"] == 2
    assert len(report["question_ids"]) == len(set(report["question_ids"])) == len(trained["correct_by_question"])


def test_a_dataset_of_numbers_is_scored_by_math_equivalence_unless_told(tmp_path, capsys):
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n"
                            for i in range(10)))
    argv = ["--task", "dataset", "--dataset_path", str(data), "--eval_fraction", "0.3", "--eval_model", "tiny",
            "--eval_base", "false", "--max_completion_length", "4", "--max_turn_tokens", "4",
            "--eval_report", str(tmp_path / "report.json")]
    for flag, scoring, said in (([], "math", "math equivalence"), (["--eval_scoring", "exact"], "exact", "exact match")):
        evaluate.run(*parse_recipe("eval", [*argv, *flag]))
        assert f"pass@1 by {said} on eval" in capsys.readouterr().out
        assert json.loads((tmp_path / "report.json").read_text())["sets"]["eval"]["scoring"] == scoring


def test_an_eval_report_named_as_its_markdown_table_is_refused(tmp_path):
    """eval_report is the JSON's path and its table goes beside it as .md: a path ending in .md would have the table
    overwrite the JSON it was just written over, and the scores would be lost while eval said where they were."""
    from rapo_trl.cli.errors import UsageError

    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n"
                            for i in range(10)))
    argv = ["--task", "dataset", "--dataset_path", str(data), "--eval_fraction", "0.3", "--eval_model", "tiny",
            "--eval_base", "false", "--max_completion_length", "4", "--max_turn_tokens", "4"]
    with pytest.raises(UsageError, match=r"eval_report .*report\.md.* ends in \.md"):
        evaluate.run(*parse_recipe("eval", [*argv, "--eval_report", str(tmp_path / "report.md")]))
    assert not (tmp_path / "report.md").exists()
    evaluate.run(*parse_recipe("eval", [*argv, "--eval_report", str(tmp_path / "report.json")]))
    assert json.loads((tmp_path / "report.json").read_text())["n"] == 3
    assert (tmp_path / "report.md").read_text().startswith("# Evaluation")


def test_eval_leaves_out_a_baseline_folder_the_run_did_not_make(tmp_path, caplog):
    """A run trained again in the same output_dir without sft_same_time (or another baseline) leaves the earlier run's
    folder there; it was scored as this run's equal-time baseline. The run record lists the baselines the run made."""
    from rapo_trl.cli.run_record import write_run_record

    target = tmp_path / "out"
    for folder in ("sft-warm-start", "sft-same-time", "grpo-same-rollouts"):
        (target / folder).mkdir(parents=True)
        (target / folder / "adapter_config.json").write_text("{}")
    (target / "sft-warm-start" / "sft_history.json").write_text("{}")  # finished
    write_run_record(str(target), ["python"], "tags", None, "arithmetic", baselines=["warm_start"])
    script, _, model_args = parse_recipe("eval", ["--eval_model", str(target), "--eval_base", "false"])
    with caplog.at_level("WARNING", logger="rapo_trl.cli"):
        models = evaluate.models_to_evaluate(script, model_args, str(target))
    assert models == {"warm_start": str(target / "sft-warm-start"), "trained": str(target)}
    assert "sft-same-time is left out" in caplog.text and "grpo-same-rollouts is left out" in caplog.text
    write_run_record(str(target), ["python"], "tags", None, "arithmetic")  # a record of an older version: all scored
    assert list(evaluate.models_to_evaluate(script, model_args, str(target))) == [
        "warm_start", "sft_same_time", "grpo_same_rollouts", "trained"]


def test_eval_leaves_out_a_baseline_the_run_stopped_before_finishing(tmp_path, caplog):
    """A run killed while it saved its equal-time baseline (the adapter written, its SFT history not yet), or while it
    trained its GRPO baseline (checkpoints alone): the record lists both, yet neither is a finished baseline."""
    from rapo_trl.cli.run_record import write_run_record

    target = tmp_path / "out"
    for folder in ("sft-warm-start", "sft-same-time", "grpo-same-rollouts/checkpoint-2"):
        (target / folder).mkdir(parents=True)
        (target / folder / "adapter_config.json").write_text("{}")
    (target / "sft-warm-start" / "sft_history.json").write_text("{}")
    write_run_record(str(target), ["python"], "tags", None, "arithmetic",
                     baselines=["warm_start", "sft_same_time", "grpo_same_rollouts"])
    script, _, model_args = parse_recipe("eval", ["--eval_model", str(target), "--eval_base", "false"])
    with caplog.at_level("WARNING", logger="rapo_trl.cli"):
        models = evaluate.models_to_evaluate(script, model_args, str(target))
    assert models == {"warm_start": str(target / "sft-warm-start"), "trained": str(target)}
    for folder, marker in (("sft-same-time", "sft_history.json"), ("grpo-same-rollouts", "trainer_state.json")):
        assert f"{target / folder} is left out: the run that trained {target} stopped before it finished" in caplog.text
        assert f"no {marker} in the folder" in caplog.text
    (target / "sft-same-time" / "sft_history.json").write_text("{}")
    (target / "grpo-same-rollouts" / "adapter_config.json").write_text("{}")
    (target / "grpo-same-rollouts" / "trainer_state.json").write_text("{}")
    assert list(evaluate.models_to_evaluate(script, model_args, str(target))) == [
        "warm_start", "sft_same_time", "grpo_same_rollouts", "trained"]


def test_train_records_the_baselines_it_makes(tiny_model_dir, tmp_path, monkeypatch):
    from rapo_trl.cli import train
    from tests.cli.conftest import recipe, write_yaml

    class Recorded(Exception):
        pass

    seen = {}

    def record(*args, **kwargs):
        seen.update(kwargs)
        raise Recorded

    monkeypatch.setattr(train, "write_run_record", record)
    config = {**recipe(tiny_model_dir, tmp_path), "output_dir": str(tmp_path / "model"), "retrieve_prob": 0.0,
              "grpo_same_rollouts": True}
    script, args, model = parse_recipe("train", ["--config", str(write_yaml(tmp_path / "r.yaml", config))])
    with pytest.raises(Recorded):
        train.run(script, args, model)
    assert seen["baselines"] == ["grpo_same_rollouts"]
    assert re.fullmatch(r"[0-9a-f]{32}", seen["run_id"])  # a new run's id: the one its baselines are stamped with


def _finished_baselines(target, stamps: dict, run_id: str | None) -> None:
    """Finished warm start and GRPO baseline folders in ``target``, each stamped with the run id ``stamps`` gives it
    (``None``: no stamp), and the record of the run ``run_id`` (``None``: a record without one) that lists both."""
    from rapo_trl.cli.run_record import RUN_RECORD, write_run_record

    for folder, marker in (("sft-warm-start", "sft_history.json"), ("grpo-same-rollouts", "trainer_state.json")):
        (target / folder).mkdir(parents=True, exist_ok=True)
        (target / folder / "adapter_config.json").write_text("{}")
        (target / folder / marker).write_text("{}")
        stamp = target / folder / "rapo_run_id.json"
        stamp.unlink(missing_ok=True)
        if stamps[folder] is not None:
            stamp.write_text(json.dumps({"run_id": stamps[folder]}))
    write_run_record(str(target), ["python"], "tags", None, "arithmetic", baselines=["warm_start", "grpo_same_rollouts"])
    if run_id is not None:
        record = json.loads((target / RUN_RECORD).read_text())
        (target / RUN_RECORD).write_text(json.dumps({**record, "run_id": run_id}))


def test_eval_leaves_out_a_finished_baseline_of_an_earlier_run_in_the_same_output_dir(tmp_path, caplog):
    """Run 1 finished its GRPO baseline; run 2, same recipe and output_dir, was killed before it made its own: the
    folder, finished and listed in the record, is run 1's, and was scored beside run 2's model as one run's."""
    target = tmp_path / "out"
    _finished_baselines(target, {"sft-warm-start": "run2", "grpo-same-rollouts": "run1"}, run_id="run2")
    script, _, model_args = parse_recipe("eval", ["--eval_model", str(target), "--eval_base", "false"])
    with caplog.at_level("WARNING", logger="rapo_trl.cli"):
        models = evaluate.models_to_evaluate(script, model_args, str(target))
    assert models == {"warm_start": str(target / "sft-warm-start"), "trained": str(target)}
    assert (f"{target / 'grpo-same-rollouts'} is left out: the run that trained {target} (run run2) did not finish "
            "this grpo_same_rollouts baseline (its rapo_run_id.json names run run1)") in caplog.text
    assert "sft-warm-start is left out" not in caplog.text
    # a folder that names no run (its run stopped while it made it again, or a version that stamped none)
    _finished_baselines(target, {"sft-warm-start": None, "grpo-same-rollouts": "run2"}, run_id="run2")
    caplog.clear()
    with caplog.at_level("WARNING", logger="rapo_trl.cli"):
        models = evaluate.models_to_evaluate(script, model_args, str(target))
    assert models == {"grpo_same_rollouts": str(target / "grpo-same-rollouts"), "trained": str(target)}
    assert "sft-warm-start is left out" in caplog.text and "names no run" in caplog.text


def test_eval_checks_no_run_id_for_a_run_recorded_without_one(tmp_path):
    """A run of a version that gave none: its baselines carry no stamp, and are scored as before."""
    target = tmp_path / "out"
    _finished_baselines(target, {"sft-warm-start": None, "grpo-same-rollouts": "run1"}, run_id=None)
    script, _, model_args = parse_recipe("eval", ["--eval_model", str(target), "--eval_base", "false"])
    assert list(evaluate.models_to_evaluate(script, model_args, str(target))) == [
        "warm_start", "grpo_same_rollouts", "trained"]


def test_a_resumed_run_keeps_its_run_id_and_a_new_run_gets_its_own(tmp_path):
    """A run resumed from a checkpoint of its output_dir is the same run: the baselines it finished before it stopped
    still count. A run started over, or resuming another folder's checkpoint, is another run."""
    from rapo_trl.cli.run_record import run_id_for, write_run_record

    out = tmp_path / "out"
    (out / "checkpoint-2").mkdir(parents=True)
    first = run_id_for(str(out), None)
    assert re.fullmatch(r"[0-9a-f]{32}", first) and run_id_for(str(out), None) != first
    write_run_record(str(out), ["python"], "tags", None, "arithmetic", baselines=[], run_id=first)
    assert run_id_for(str(out), str(out / "checkpoint-2")) == first
    assert run_id_for(str(out), None) != first  # --resume_from_checkpoint false: trained from the start
    elsewhere = tmp_path / "other" / "checkpoint-2"
    elsewhere.mkdir(parents=True)
    assert run_id_for(str(out), str(elsewhere)) not in (first, None)
    write_run_record(str(out), ["python"], "tags", None, "arithmetic", baselines=[])  # an older version's run
    assert run_id_for(str(out), str(out / "checkpoint-2")) is None


def test_the_grpo_baseline_names_its_run_once_finished_and_no_run_while_it_trains(tmp_path, monkeypatch):
    """The GRPO baseline made again names no run until it is saved: a run stopped while it trains it leaves no folder
    that names the run (nor an earlier one of the same id: a resumed run trains it again)."""
    from types import SimpleNamespace

    from rapo_trl.cli import grpo_baseline
    from rapo_trl.cli.run_record import baseline_run_id, stamp_baseline

    folder = tmp_path / "out" / "grpo-same-rollouts"
    folder.mkdir(parents=True)
    stamp_baseline(folder, "run1")
    seen = {}

    class Trainer:
        state = SimpleNamespace(global_step=2)

        def train(self):
            seen["while training"] = baseline_run_id(folder)
            return SimpleNamespace(metrics={"train_runtime": 1.0})

        def save_model(self, path):
            pass

        def is_world_process_zero(self):
            return True

    monkeypatch.setattr(grpo_baseline, "build_trainer", lambda *args: Trainer())
    monkeypatch.setattr(grpo_baseline, "save_history_and_plots", lambda trainer, path: None)
    monkeypatch.setattr(grpo_baseline, "with_values", lambda args, **values: args)
    rapo_args = SimpleNamespace(output_dir=str(tmp_path / "out"), max_steps=2)
    grpo_baseline.train_grpo_baseline(None, None, None, rapo_args, steps=2, run_id="run1")
    assert seen["while training"] is None and baseline_run_id(folder) == "run1"


@pytest.mark.parametrize("rank", ["0", "1"])
def test_train_prints_its_lines_in_the_launch_s_first_process_alone(tiny_model_dir, tmp_path, monkeypatch, capsys,
                                                                     rank):
    """Under torchrun every process runs `rapo train`: its lines ("Training on ...") came once per process."""
    from rapo_trl.cli import train
    from tests.cli.conftest import recipe, write_yaml

    class Loaded(Exception):
        pass

    def loaded(*args, **kwargs):
        raise Loaded

    monkeypatch.setattr(train, "load_policy_source", loaded)  # the lines before the model loads are enough
    monkeypatch.setenv("RANK", rank)
    config = {**recipe(tiny_model_dir, tmp_path), "output_dir": str(tmp_path / "model"), "retrieve_prob": 0.0}
    script, args, model = parse_recipe("train", ["--config", str(write_yaml(tmp_path / "r.yaml", config))])
    with pytest.raises(Loaded):
        train.run(script, args, model)
    out = capsys.readouterr().out
    assert ("Training on 6 questions" in out) == (rank == "0")


def test_eval_base_of_a_whole_model_is_the_base_its_run_recorded_or_said_to_be_left_out(tmp_path, tiny_model_dir,
                                                                                         caplog):
    """A model trained whole names no base of its own (no adapter_config.json): eval scores the base `rapo train`
    recorded, and where there is none that loads it says, in one line, that the base is left out."""
    from rapo_trl.cli.run_record import write_run_record

    target = tmp_path / "out"
    target.mkdir()
    (target / "config.json").write_text("{}")
    write_run_record(str(target), ["python"], "tags", None, "arithmetic", base_model=str(tiny_model_dir))
    script, _, model_args = parse_recipe("eval", ["--eval_model", str(target)])
    assert evaluate.models_to_evaluate(script, model_args, str(target)) == {"base": str(tiny_model_dir),
                                                                            "trained": str(target)}
    for recorded, words in ((None, f"the base model is left out: {target} names no base"),
                            (str(tmp_path / "gone"), f"the base model {tmp_path / 'gone'} that trained {target} is "
                                                     "left out")):
        write_run_record(str(target), ["python"], "tags", None, "arithmetic", base_model=recorded)
        caplog.clear()
        with caplog.at_level("WARNING", logger="rapo_trl.cli"):
            assert list(evaluate.models_to_evaluate(script, model_args, str(target))) == ["trained"]
        assert words in caplog.text and "--model_name_or_path" in caplog.text and len(caplog.records) == 1


def test_eval_leaves_out_the_grpo_baseline_of_a_resumed_runs_earlier_session(tiny_model_dir, tmp_path, monkeypatch,
                                                                              caplog):
    """A run trained one step, with its GRPO baseline; resumed (it keeps its id) to train two, it stopped once RAPO was
    saved, before it trained its baseline again: the folder still held the one-step baseline, stamped with the run's
    id, and was scored beside the two-step model as trained from the same start for as many steps."""
    from rapo_trl.cli import train
    from tests.cli.conftest import recipe, write_yaml

    class Stopped(Exception):
        pass

    def stop(*args, **kwargs):
        raise Stopped

    target = tmp_path / "model"
    config = write_yaml(tmp_path / "r.yaml", {
        **recipe(tiny_model_dir, tmp_path), "output_dir": str(target), "retrieve_prob": 0.0,
        "grpo_same_rollouts": True, "save_strategy": "steps", "save_steps": 1})
    train.run(*parse_recipe("train", ["--config", str(config)]))
    script, _, model_args = parse_recipe("eval", ["--eval_model", str(target), "--eval_base", "false"])
    assert "grpo_same_rollouts" in evaluate.models_to_evaluate(script, model_args, str(target))
    monkeypatch.setattr(train, "_train_grpo_after_rapo", stop)
    with pytest.raises(Stopped):
        train.run(*parse_recipe("train", ["--config", str(config), "--max_steps", "2", "--resume_from_checkpoint"]))
    assert json.loads((target / "trainer_state.json").read_text())["global_step"] == 2
    with caplog.at_level("WARNING", logger="rapo_trl.cli"):
        models = evaluate.models_to_evaluate(script, model_args, str(target))
    assert models == {"trained": str(target)}
    assert "grpo-same-rollouts is left out" in caplog.text
