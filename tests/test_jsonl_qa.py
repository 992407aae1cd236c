"""The standard-library JSONL reader the CLI checks files with before anything heavy loads."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rapo_trl.jsonl_qa import read_qa_jsonl


def _file(tmp_path, *lines):
    path = tmp_path / "qa.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


GOOD = json.dumps({"question": "What is 2 + 2?", "answer": "4"})


@pytest.mark.parametrize("bad_line, words", [
    ('{"question": "What is 3 + 3?", "answer": "6"', "qa.jsonl:2: not JSON"),  # its own error says "line 1"
    (json.dumps({"question": "What is 3 + 3?", "answer": None}), "qa.jsonl:2: 'answer' is null"),
    # a blank gold is matched exactly by an empty \boxed{}: a pass for an answer of nothing
    (json.dumps({"question": "What is 3 + 3?", "answer": " "}), "qa.jsonl:2: 'answer' is \" \"; every question needs"),
    # json.dumps writes a missing pandas value as NaN: a gold no answer matches
    (json.dumps({"question": "What is 3 + 3?", "answer": float("nan")}), "qa.jsonl:2: 'answer' is NaN; every question"),
    (json.dumps({"question": "", "answer": "6"}), "qa.jsonl:2: 'question' must be a non-empty string"),
    (json.dumps(["What is 3 + 3?", "6"]), "qa.jsonl:2: a JSON list where an object"),
    (json.dumps({"question": "What is 3 + 3?"}), "qa.jsonl:2: no key 'answer'"),
])
def test_each_mistake_is_named_at_its_own_line(tmp_path, bad_line, words):
    with pytest.raises(ValueError, match=words):
        read_qa_jsonl(_file(tmp_path, GOOD, bad_line, GOOD))


def test_rows_and_the_reader_imports_nothing_heavy(tmp_path):
    path = _file(tmp_path, GOOD, "", json.dumps({"q": "What is 1 + 1?", "a": ["2", "two"]}).replace('"q"', '"question"')
                 .replace('"a"', '"answer"'))
    assert read_qa_jsonl(path) == [{"question": "What is 2 + 2?", "answer": ["4"]},  # one type with the list
                                   {"question": "What is 1 + 1?", "answer": ["2", "two"]}]
    code = f"from rapo_trl.jsonl_qa import read_qa_jsonl; import sys; read_qa_jsonl({str(path)!r}); " \
           "print([m for m in ('torch', 'datasets', 'trl') if m in sys.modules])"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.stdout.strip() == "[]", run.stderr


@pytest.mark.parametrize("answers, read", [
    ([12, "15"], ["12", "15"]),
    ([1e-05, "15"], ["0.00001", "15"]),  # not 1e-05, which no answer matches
    ([12, 2.5], [12, 2.5]),  # numbers alone stay numbers
    (["4", ["2", 2]], [["4"], ["2", "2"]]),
    ([7, [1, 2]], [[7], [1, 2]]),
])
def test_answers_of_mixed_types_load_as_one_column(tmp_path, answers, read):
    from rapo_trl.tasks import load_jsonl_qa

    path = _file(tmp_path, *(json.dumps({"question": f"Question {i}?", "answer": a}) for i, a in enumerate(answers)))
    assert [row["answer"] for row in read_qa_jsonl(path)] == read
    assert load_jsonl_qa(path)["answer"] == read  # the dataset column Arrow refused before


@pytest.mark.parametrize("answers, read", [
    (["twelve", 15], ["twelve", "15"]),
    (["4", ["2", 2]], [["4"], ["2", "2"]]),
    ([7, [1, 2]], [[7], [1, 2]]),
])
def test_mixed_answers_loaded_by_datasets_become_rows(tmp_path, monkeypatch, answers, read):
    """docs/your-own-task.md loads its JSONL file with ``load_dataset("json")``, which keeps a mix of answer types
    as they are (a ``Json`` column): ``to_rapo_rows`` brings them to one type as the JSONL reader does."""
    from datasets import load_dataset

    from rapo_trl import PythonTool, rapo_outcome_reward, to_rapo_rows

    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    path = _file(tmp_path, *(json.dumps({"question": f"Question {i}?", "answer": a}) for i, a in enumerate(answers)))
    rows = to_rapo_rows(load_dataset("json", data_files=str(path), split="train"), tools=[PythonTool()])
    assert rows["answer"] == read
    answer = "<think>t</think>\n<answer>\\boxed{%s}</answer>"
    completions = [answer % (a[0] if isinstance(a, list) else a) for a in read]
    assert rapo_outcome_reward(None, completions, None, answer=rows["answer"]) == [1.0] * len(read)


def test_the_early_checks_read_the_training_file_once(tmp_path, monkeypatch):
    """Its contents checked and its keys (the columns a reward may read) from one read."""
    import builtins

    from rapo_trl.cli import read_recipe

    path = _file(tmp_path, GOOD, json.dumps({"question": "What is 3 + 3?", "answer": "6", "units": "apples"}))
    reads = []

    def counting_open(file, *args, **kwargs):
        reads.append(str(file))
        return builtins.open(file, *args, **kwargs)

    monkeypatch.setattr("rapo_trl.jsonl_qa.open", counting_open, raising=False)
    read_recipe("train", ["--task", "dataset", "--dataset_path", str(path)])
    assert reads == [str(path)]
