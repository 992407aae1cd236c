"""A JSONL file's own keys on the command line: kept as columns that reach the rewards, as `load_dataset("json")`
keeps them from Python (docs/your-own-task.md), its `question_id` kept as each question's id."""

from __future__ import annotations

import json

import pytest

from rapo_trl.cli import read_recipe
from rapo_trl.cli.common import check_script_arguments, training_rows
from rapo_trl.cli.errors import UsageError


def _file(tmp_path, rows):
    path = tmp_path / "qs.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


ROWS = [{"question": f"What is {i} + 1?", "answer": str(i + 1), "unit": "apples", "question_id": f"mine-{i}"}
        for i in range(6)]


def test_a_files_own_keys_and_ids_reach_the_rows_and_the_reward_check(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "unit_rewards.py").write_text("def by_unit(completions, unit, **kwargs):\n    return [0.0] * len(unit)\n")
    path = _file(tmp_path, ROWS)
    script, _, _ = read_recipe("train", ["--task", "dataset", "--dataset_path", str(path),
                                         "--reward_funcs", "unit_rewards.by_unit"])
    check_script_arguments("train", script)  # the reward's `unit` is a key of the file
    rows = training_rows(script, "train", [])
    assert set(rows["unit"]) == {"apples"}
    assert set(rows["question_id"]) <= {row["question_id"] for row in ROWS}


def test_a_files_id_that_names_two_questions_is_refused(tmp_path):
    path = _file(tmp_path, [{**row, "question_id": "same"} if i < 2 else row for i, row in enumerate(ROWS)])
    script, _, _ = read_recipe("train", ["--task", "dataset", "--dataset_path", str(path)])
    with pytest.raises(UsageError, match="question_id 'same' names two questions"):
        training_rows(script, "train", [])


def test_a_key_of_mixed_types_is_left_out_with_a_warning(tmp_path, caplog):
    from rapo_trl.tasks import load_jsonl_qa

    path = _file(tmp_path, [{"question": "What is 1 + 1?", "answer": "2", "meta": 3},
                            {"question": "What is 2 + 2?", "answer": "4", "meta": "x"}])
    assert load_jsonl_qa(path).column_names == ["question", "answer", "question_id"]
    assert "key 'meta' left out" in caplog.text
