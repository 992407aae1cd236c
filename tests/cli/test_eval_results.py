"""`rapo eval` says how many questions it asks and records which (their ids) in eval_results.json."""

from __future__ import annotations

import json

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
