"""`task: dataset`: your own data from a JSONL file or a dataset (Hub id or folder, TRL's dataset_* flags), with
evaluation questions that training never sees."""

from __future__ import annotations

import json
import re

import pytest
from datasets import Dataset, DatasetDict

from rapo_trl.cli import read_recipe
from rapo_trl.cli.arguments import RAPOScriptArguments
from rapo_trl.cli.common import UsageError, check_script_arguments, load_questions


def _jsonl(path, start, n, key="question"):
    path.write_text("".join(json.dumps({key: f"What is {i} * 3?", "answer": str(3 * i)}) + "\n"
                            for i in range(start, start + n)))
    return str(path)


def _questions(script, split):
    return load_questions(script, split)["question"]


def test_jsonl_holds_out_a_seeded_fraction_never_trained_on(tmp_path):
    script = RAPOScriptArguments(task="jsonl", dataset_path=_jsonl(tmp_path / "qa.jsonl", 0, 10), train_size=100,
                                 eval_size=100, eval_fraction=0.3)
    train, held = _questions(script, "train"), _questions(script, "eval")
    assert len(held) == 3 and len(train) == 7 and not set(train) & set(held)
    script.eval_size = 2
    assert _questions(script, "eval") == held[:2]  # eval_size takes from the held-out rows only


def test_eval_dataset_path_is_the_eval_set_and_leaves_training(tmp_path):
    script = RAPOScriptArguments(task="dataset", dataset_path=_jsonl(tmp_path / "train.jsonl", 0, 10),
                                 eval_dataset_path=_jsonl(tmp_path / "eval.jsonl", 8, 4), train_size=100, eval_size=100)
    assert _questions(script, "eval") == [f"What is {i} * 3?" for i in range(8, 12)]
    assert _questions(script, "train") == [f"What is {i} * 3?" for i in range(8)]


def _splits(n_train, n_test):
    def part(start, n):
        return Dataset.from_dict({"problem": [f"What is {i} - 1?" for i in range(start, start + n)],
                                  "solution": [str(i - 1) for i in range(start, start + n)]})

    return DatasetDict({"train": part(0, n_train), **({"test": part(100, n_test)} if n_test else {})})


def test_dataset_name_takes_trls_flags_and_a_column_mapping(tmp_path):
    _splits(6, 3).save_to_disk(tmp_path / "saved")
    files = tmp_path / "files"  # a script-less data folder, as on the Hub
    files.mkdir()
    _splits(6, 3)["train"].to_json(files / "train.jsonl")
    _splits(6, 3)["test"].to_json(files / "test.jsonl")
    for folder in ("saved", "files"):
        script, _, _ = read_recipe("train", ["--task", "dataset", "--dataset_name", str(tmp_path / folder),
                                             "--dataset_train_split", "train", "--dataset_test_split", "test",
                                             "--question_column", "problem", "--answer_column", "solution",
                                             "--eval_size", "10"])
        rows = load_questions(script, "eval")
        assert rows["question"] == [f"What is {i} - 1?" for i in range(100, 103)] and rows["answer"][0] == "99"
        assert len(_questions(script, "train")) == 6


def test_dataset_without_a_test_split_holds_out_eval_fraction(tmp_path):
    _splits(20, 0).save_to_disk(tmp_path / "saved")
    script = RAPOScriptArguments(task="dataset", dataset_name=str(tmp_path / "saved"), question_column="problem",
                                 answer_column="solution", eval_fraction=0.25, train_size=100, eval_size=100)
    held, train = _questions(script, "eval"), _questions(script, "train")
    assert len(held) == 5 and len(train) == 15 and not set(held) & set(train)


@pytest.mark.parametrize("changes, words", [
    ({"task": "dataset"}, "needs dataset_path"),
    ({"task": "dataset", "dataset_path": "missing.jsonl"}, "is not a file"),
    ({"task": "dataset", "dataset_name": "org/ds", "dataset_path": "x.jsonl"}, "not both"),
    ({"task": "arithmetic", "dataset_name": "org/ds"}, "set task: dataset"),
    ({"task": "jsonl", "dataset_name": "org/ds", "eval_fraction": 1.0}, "eval_fraction must be in (0, 1)"),
])
def test_user_data_mistakes_answer_before_anything_loads(changes, words):
    with pytest.raises(UsageError, match=words.replace("(", r"\(").replace(")", r"\)")):
        check_script_arguments("train", RAPOScriptArguments(**changes))


def test_a_column_that_is_not_there_is_named(tmp_path):
    _splits(4, 2).save_to_disk(tmp_path / "saved")
    script = RAPOScriptArguments(task="dataset", dataset_name=str(tmp_path / "saved"))
    with pytest.raises(UsageError, match="no column 'question'; it has problem, solution"):
        load_questions(script, "train")


# Every row by default, caps only when set, the counts printed, the split names checked, no null answer.


def test_your_data_is_used_whole_unless_capped(tmp_path):
    path = _jsonl(tmp_path / "qa.jsonl", 0, 100)
    script = RAPOScriptArguments(task="dataset", dataset_path=path)  # no train_size/eval_size: every row
    train, held = _questions(script, "train"), _questions(script, "eval")
    assert (len(train), len(held)) == (90, 10) and not set(train) & set(held)
    script.train_size, script.eval_size = 20, 4
    assert _questions(script, "train") == train[:20] and _questions(script, "eval") == held[:4]
    shipped = RAPOScriptArguments(task="arithmetic")  # the generated tasks keep their default draw
    assert (len(_questions(shipped, "train")), len(_questions(shipped, "eval"))) == (64, 32)


def test_the_count_line_says_how_many_and_how_to_cap(tmp_path):
    from rapo_trl.cli.common import count_line

    script = RAPOScriptArguments(task="dataset", dataset_path=_jsonl(tmp_path / "qa.jsonl", 0, 100))
    line = count_line("Training on", script, {"train": load_questions(script, "train")})
    assert line == "Training on 90 questions (task=dataset, train: 90; every row; train_size caps them)"
    script.eval_size = 4
    assert count_line("Evaluating on", script, {"eval": load_questions(script, "eval")}).endswith(
        "eval: 4; at most eval_size=4)")


def test_split_names_are_checked_not_guessed(tmp_path):
    _splits(6, 3).save_to_disk(tmp_path / "saved")
    common = ["--task", "dataset", "--dataset_name", str(tmp_path / "saved"), "--question_column", "problem",
              "--answer_column", "solution"]
    with pytest.raises(UsageError, match="has no split 'tset' \\(dataset_test_split\\); did you mean 'test'"):
        read_recipe("train", [*common, "--dataset_test_split", "tset"])  # before: eval_fraction, silently
    with pytest.raises(UsageError, match="has no split 'trian' \\(dataset_train_split\\)"):
        read_recipe("train", [*common, "--dataset_train_split", "trian"])
    script, _, _ = read_recipe("train", common)  # unset: the `test` split it has
    assert len(load_questions(script, "eval")) == 3
    jsonl = _jsonl(tmp_path / "qa.jsonl", 0, 10)
    with pytest.raises(UsageError, match="dataset_test_split names a split of dataset_name; with dataset_path give"):
        read_recipe("train", ["--task", "dataset", "--dataset_path", jsonl, "--dataset_test_split", "test"])


@pytest.mark.parametrize("eval_set, words", [
    (["--eval_dataset_path", "EVAL"], "the eval questions are eval_dataset_path"),
    (["--dataset_name", "SAVED", "--dataset_test_split", "test"], "the eval questions are dataset_test_split 'test'"),
    (["--dataset_name", "SAVED"], "the eval questions are the dataset's 'test' split"),
    (["--dataset_name", "FILES"], "the eval questions are the dataset's 'test' split"),  # known once it loads
])
def test_an_eval_fraction_the_eval_set_leaves_unused_is_refused(tmp_path, eval_set, words):
    """With eval questions of the data's own, nothing is held out: an eval_fraction set is not silently dropped."""
    _splits(6, 3).save_to_disk(tmp_path / "saved")
    (tmp_path / "files").mkdir()
    for split, rows in _splits(6, 3).items():
        rows.to_json(tmp_path / "files" / f"{split}.jsonl")
    places = {"EVAL": _jsonl(tmp_path / "eval.jsonl", 8, 4), "SAVED": str(tmp_path / "saved"),
              "FILES": str(tmp_path / "files")}
    if "--dataset_name" in eval_set:
        data = ["--question_column", "problem", "--answer_column", "solution"]
    else:
        data = ["--dataset_path", _jsonl(tmp_path / "train.jsonl", 0, 8)]
    argv = ["--task", "dataset", *data, *[places.get(flag, flag) for flag in eval_set]]
    script, _, _ = read_recipe("train", argv)  # the eval fraction unset: the data's own eval set
    assert len(load_questions(script, "eval")) in (3, 4)
    with pytest.raises(UsageError, match=re.escape(words)):
        load_questions(read_recipe("train", [*argv, "--eval_fraction", "0.3"])[0], "eval")


def test_a_file_given_as_dataset_name_points_to_dataset_path(tmp_path):
    jsonl = _jsonl(tmp_path / "qa.jsonl", 0, 10)
    with pytest.raises(UsageError, match=f"dataset_name '{jsonl}' is a file, not a dataset: give a JSONL file as "
                                         f"dataset_path \\(--dataset_path {jsonl}\\)"):
        read_recipe("train", ["--task", "dataset", "--dataset_name", jsonl])


def test_null_answers_are_refused_in_files_and_datasets(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_text(json.dumps({"question": "What is 1 * 3?", "answer": "3"}) + "\n"
                    + json.dumps({"question": "What is 2 * 3?", "answer": None}) + "\n")
    with pytest.raises(UsageError, match="qa.jsonl:2: 'answer' is null; every question needs its answer"):
        read_recipe("train", ["--task", "dataset", "--dataset_path", str(path)])
    data = _splits(6, 0)
    data["train"] = data["train"].map(lambda row, i: {"solution": None if i == 4 else row["solution"]},
                                      with_indices=True)
    data.save_to_disk(tmp_path / "saved")
    script = RAPOScriptArguments(task="dataset", dataset_name=str(tmp_path / "saved"), question_column="problem",
                                 answer_column="solution")
    with pytest.raises(UsageError, match="split 'train'\\) row 4: 'solution' is None"):
        load_questions(script, "train")
    data["train"] = data["train"].map(lambda row, i: {"solution": "  " if i == 2 else "1"}, with_indices=True)
    data.save_to_disk(tmp_path / "blank")
    script.dataset_name = str(tmp_path / "blank")
    with pytest.raises(UsageError, match="split 'train'\\) row 2: 'solution' is '  '"):
        load_questions(script, "train")


def test_a_nan_answer_is_refused_not_trained_on(tmp_path):
    # A missing value from pandas is NaN, which json.dumps writes and a float column keeps: no answer matches it.
    path = tmp_path / "qa.jsonl"
    path.write_text("".join(json.dumps({"question": f"What is {i} * 3?", "answer": float("nan") if i == 3 else 3 * i})
                            + "\n" for i in range(6)))
    with pytest.raises(UsageError, match="qa.jsonl:4: 'answer' is NaN; every question needs its answer"):
        read_recipe("train", ["--task", "dataset", "--dataset_path", str(path)])
    data = DatasetDict({"train": Dataset.from_dict({"problem": [f"What is {i} - 1?" for i in range(6)],
                                                    "solution": [float("nan") if i == 4 else i - 1.0 for i in range(6)]})})
    data.save_to_disk(tmp_path / "saved")
    script = RAPOScriptArguments(task="dataset", dataset_name=str(tmp_path / "saved"), question_column="problem",
                                 answer_column="solution")
    with pytest.raises(UsageError, match="split 'train'\\) row 4: 'solution' is nan"):
        load_questions(script, "train")


def test_a_question_asked_twice_with_different_answers_is_named(tmp_path, caplog):
    path = tmp_path / "qa.jsonl"
    rows = [{"question": f"What is {i} * 3?", "answer": str(3 * i)} for i in range(8)]
    rows.append({"question": "what is 2  * 3? ", "answer": "7"})  # the same question up to spacing and case
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    script = RAPOScriptArguments(task="jsonl", dataset_path=str(path), eval_fraction=0.25)
    with caplog.at_level("WARNING", logger="rapo_trl.cli.user_data"):
        load_questions(script, "train")
    assert "1 question(s) appear more than once with different answers" in caplog.text
    assert "'6' vs '7'" in caplog.text
    caplog.clear()
    path.write_text("".join(json.dumps(row) + "\n" for row in rows[:-1] + [{**rows[2], "question": "What is 2 * 3?"}]))
    with caplog.at_level("WARNING", logger="rapo_trl.cli.user_data"):
        load_questions(script, "train")
    assert "different answers" not in caplog.text  # a repeat with its own answer is no conflict
