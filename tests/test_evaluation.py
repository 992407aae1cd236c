"""Held-out evaluation: Wilson intervals, scoring, the markdown table, batched greedy rollouts of a live model."""

from __future__ import annotations

import pytest
from datasets import Dataset

from rapo_trl.evaluation import evaluate_policy, format_table, score_texts, wilson_interval
from tests.helpers.scripted import ScriptedGenerate, Turn
from tests.rollout.test_engine import EchoTool


@pytest.mark.parametrize(
    ("k", "n", "expected"),
    [
        (0, 64, (0.0, 0.0566)),  # upper end z^2 / (n + z^2) = 3.8416 / 67.8416
        (64, 64, (0.9434, 1.0)),
        (32, 64, (0.3810, 0.6190)),  # 0.5 -+ z sqrt(1/4n + z^2/4n^2) / (1 + z^2/n)
    ],
)
def test_wilson_interval_matches_hand_computed_values(k, n, expected):
    lo, hi = wilson_interval(k, n)
    assert lo == pytest.approx(expected[0], abs=1e-4) and hi == pytest.approx(expected[1], abs=1e-4)


def test_wilson_interval_of_nothing_is_empty():
    assert wilson_interval(0, 0) == (0.0, 0.0)


def answer(value):
    return f"<think>ok</think>\n<answer>\\boxed{{{value}}}</answer>"


def test_score_texts_counts_numeric_equivalence_and_format():
    scores = score_texts([answer("12"), answer("12.0"), answer("13"), "no tags"], ["12"] * 4, numeric=True)
    assert scores["correct"] == 2 and scores["n"] == 4 and scores["pass@1"] == 0.5
    assert scores["format_ok"] == 0.75
    lo, hi = scores["pass@1_ci95"]
    assert lo < 0.5 < hi
    # exact match only when the task is not numeric
    assert score_texts([answer("12.0")], ["12"], numeric=False)["correct"] == 0


def test_format_table_shows_counts_and_interval():
    table = format_table({"trained": {"pass@1": 0.5, "pass@1_ci95": [0.38, 0.62], "correct": 32, "n": 64,
                                      "f1": 0.5, "em": 0.5, "format_ok": 1.0, "tool_calls": 1.0}}, "task, n=64")
    header, rule, row = table.splitlines()
    assert header.startswith("| model (task, n=64) | pass@1 | 95% CI |")
    assert row == "| trained | 0.500 (32/64) | 0.380-0.620 | 0.500 | 0.500 | 1.000 | 1.000 |"


def test_evaluate_policy_runs_greedy_tool_rollouts_in_batches(tiny_model):
    model, tok = tiny_model
    rows = Dataset.from_list([
        {"prompt": [{"role": "user", "content": f"question {i}"}], "answer": str(i)} for i in range(5)
    ])
    # Row i calls the tool, then answers i (rows 0-2) or a wrong value (rows 3-4).
    scripts = [[Turn("<python>x</python>"), Turn(answer(i if i < 3 else 99))] for i in range(5)]
    prompts = [tok.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=False)
               for p in rows["prompt"]]
    model.generate = ScriptedGenerate(tok, {tuple(p): s for p, s in zip(prompts, scripts)}, model.config.vocab_size)
    model.train()
    result = evaluate_policy(model, tok, rows, [EchoTool()], max_completion_length=128, max_turn_tokens=32,
                             batch_size=2, progress=False)
    assert result["correct"] == 3 and result["n"] == 5 and result["pass@1"] == 0.6
    assert result["tool_calls"] == 1.0 and result["truncated"] == 0.0
    assert len(result["texts"]) == 5 and result["texts"][4].endswith(answer(99))
    assert model.generate.calls == 6  # 3 batches (2 + 2 + 1 rows) x 2 turns
    assert model.training  # evaluating a model mid-training leaves it in training mode
