"""RAPO's step split, the shared key/query preprocessing, and step records."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rapo_trl.store import preprocess_context, split_steps, step_records
from rapo_trl.tasks.trajectory import TrajectoryWriter

R = "<result>\n7\n</result>"

SPLIT_CASES = [
    # (trajectory, expected steps)
    ("<think>a</think><answer>1</answer>", ["<think>a</think><answer>1</answer>"]),
    (f"<python>x</python> {R}<answer>1</answer>", [f"<python>x</python> {R}", "<answer>1</answer>"]),
    (
        f"<search>q</search>\n{R}\n<python>y</python>\n{R}\n<answer>2</answer>\n",
        [f"<search>q</search>\n{R}", f"\n<python>y</python>\n{R}", "\n<answer>2</answer>\n"],
    ),
    # a tool call the environment never answered: the step ends at the closing tag
    ("<python>x</python><think>b</think>", ["<python>x</python>", "<think>b</think>"]),
    # a result cut off by the length limit runs to the end
    ("<python>x</python>\n<result>\npartial", ["<python>x</python>\n<result>\npartial"]),
    # closing tags inside a result do not start a new step
    (
        "<search>q</search><result>doc with </python> inside</result>ok",
        ["<search>q</search><result>doc with </python> inside</result>", "ok"],
    ),
    # trailing whitespace after the last tool step is attached to it
    (f"<python>x</python>{R}  \n", [f"<python>x</python>{R}  \n"]),
    ("   \n", []),
    ("", []),
]


@pytest.mark.parametrize(("text", "expected"), SPLIT_CASES)
def test_split_steps(text, expected):
    assert split_steps(text) == expected


_pieces = st.lists(
    st.sampled_from(
        ["<python>", "</python>", "</search>", "<result>", "</result>", "<answer>", "x", " ", "\n", "ab"]
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(_pieces)
def test_split_steps_is_a_partition(pieces):
    text = "".join(pieces)
    steps = split_steps(text)
    assert "".join(steps) == (text if text.strip() else "")
    assert all(step.strip() for step in steps)
    # every step but the last ends with a tool call (and maybe its result)
    for step in steps[:-1]:
        stripped = step.rstrip()
        assert stripped.endswith(("</python>", "</search>", "</result>")) or "<result>" in step


PREPROCESS_CASES = [
    # (raw context, kwargs, expected)
    (
        "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n<think>add</think>",
        {},
        "What is 2+2? <think>add</think>",
    ),
    (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nQ?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nA",
        {},
        "Q? A",
    ),
    ("SYSTEM RULES. Question: x", {"system_prompt": "SYSTEM RULES."}, "Question: x"),
    (
        "Q <python>a</python><result>1</result>\nAdditional context.\n<retrieve>\nold step\n</retrieve>\n<think>b",
        {},
        "Q <python>a</python><result>1</result> Additional context. <think>b",
    ),
    ("a   b\n\n\tc", {}, "a b c"),
    ("one two three four", {"max_chars": 9}, "four"),  # the half word 'ree' is dropped
    ("x" * 100, {"max_chars": 10}, "x" * 10),  # a single long token is kept cut
]


@pytest.mark.parametrize(("raw", "kwargs", "expected"), PREPROCESS_CASES)
def test_preprocess_context(raw, kwargs, expected):
    assert preprocess_context(raw, **kwargs) == expected


def test_preprocess_keeps_the_tail_within_budget():
    text = " ".join(f"w{i}" for i in range(2000))
    out = preprocess_context(text)
    assert len(out) <= 1300 and out.endswith("w1999") and out.startswith("w")


def test_step_records_keys_are_question_plus_previous_steps():
    text = "<think>t</think><python>p1</python><result>r1</result><search>s</search><result>r2</result><answer>a</answer>"
    records = step_records(text, 1.0, "q7", question="What is x?", source="offline")
    assert [r.step_index for r in records] == [0, 1, 2]
    assert all(r.num_steps == 3 and r.reward == 1.0 and r.question_id == "q7" for r in records)
    assert records[0].key == "What is x?"
    assert records[1].key == "What is x? <think>t</think><python>p1</python><result>r1</result>"
    assert records[2].key.endswith("<search>s</search><result>r2</result>")
    assert records[2].value == "<answer>a</answer>"
    # keys are what a query of the same context becomes
    assert records[1].key == preprocess_context(
        "<|im_start|>user\nWhat is x?<|im_end|>\n" + split_steps(text)[0]
    )


def test_record_ids_are_deterministic_and_distinct():
    text = "<python>p</python><result>r</result><answer>a</answer>"
    first = step_records(text, 1.0, "q1", created_at="t0")
    again = step_records(text, 1.0, "q1", created_at="t1")
    other_question = step_records(text, 1.0, "q2")
    assert [r.record_id for r in first] == [r.record_id for r in again]
    assert len({r.record_id for r in first + other_question}) == 4


def test_an_expert_tool_output_holding_the_result_tag_stays_in_its_step():
    writer = TrajectoryWriter(fallbacks={"python": lambda code: "</result>\n<python>1</python>\n"})
    writer.think("t")
    writer.call("python", "print()")
    writer.answer("\\boxed{1}")
    first, second = split_steps(writer.text())
    assert first.endswith("<result>\n<\\/result>\n<python>1</python>\n\n</result>")
    assert second == "\n<answer>\\boxed{1}</answer>"

