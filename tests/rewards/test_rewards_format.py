"""RAPO's format rules (docs/design.md, Outcome reward) against hand-made completions."""

from __future__ import annotations

import pytest

from rapo_trl.rewards import RETRIEVE_PREFACE, format_check, last_boxed, strip_retrieved_blocks, tools_used
from rapo_trl.rewards.parsing import completion_text, extract_prediction

THINK = "<think>plan</think>\n"
PY = "<python>\nprint(6 * 7)\n</python>\n<result>\n42\n</result>\n"
SEARCH = "<search>capital of Zorvia</search>\n<result>\nDoc 1 (Zorvia): ...\n</result>\n"
ANSWER = "<answer>\\boxed{42}</answer>"
ADD = '<add>{"a": 40, "b": 2}</add>\n<result>\n42\n</result>\n'  # a function tool's call (FunctionTool)

GOOD = [
    ("think and answer only", THINK + ANSWER),
    ("python call", THINK + PY + "<think>done</think>" + ANSWER),
    ("both tools", THINK + SEARCH + PY + ANSWER),
    ("several think blocks", THINK + PY + THINK + SEARCH + THINK + ANSWER),
    ("nested braces in boxed", THINK + "<answer>\\boxed{\\frac{1}{2}}</answer>"),
    ("text around boxed", THINK + "<answer>It is \\boxed{42} apples.</answer>"),
    (
        "tags inside a tool result are not the policy's",
        THINK + "<python>\nx\n</python><result>\n<answer></think>\n</result>" + ANSWER,
    ),
    (
        "result on the same line as the call",
        THINK + "<search>q</search> <result>\nDoc 1: a\n</result>" + ANSWER,
    ),
    ("function tool call", THINK + ADD + ANSWER),
    ("function tool result on the same line", THINK + '<square>7</square> <result>\n49\n</result>' + ANSWER),
    ("function tools beside the built-in ones", THINK + SEARCH + ADD + PY + "<lookup>Paris</lookup><result>x</result>" + ANSWER),
    ("tag with digits, dot, dash", THINK + "<geo.lookup-2>Paris</geo.lookup-2>\n<result>\n1\n</result>" + ANSWER),
    ("same function called twice", THINK + ADD + THINK + ADD + ANSWER),
    ("stray unknown tags are text", THINK + "<b>bold</b> <i>x" + ANSWER),
    ("stray unknown tags beside a function call", THINK + "<b>bold</b> " + ADD + "<i>x</i>" + ANSWER),
    (
        "tags inside a function's result are not the policy's",
        THINK + "<city>Paris</city>\n<result>\n</city><answer><python>\n</result>" + ANSWER,
    ),
]

BAD = [
    ("no think", ANSWER, "no <think> block"),
    ("</think> without open", "plan</think>" + ANSWER, "</think> without an opening <think>"),
    ("<think> never closed", "<think>plan" + ANSWER, "<think> never closed"),
    ("nested think", "<think>a<think>b</think></think>" + ANSWER, "<think> opened again before </think>"),
    ("empty think", "<think> \n</think>" + ANSWER, "empty <think> block"),
    (
        "double answer",
        THINK + ANSWER + ANSWER,
        "expected exactly one <answer>...</answer>, found 2 <answer> and 2 </answer>",
    ),
    ("no answer", THINK, "expected exactly one <answer>...</answer>, found 0 <answer> and 0 </answer>"),
    ("answer not closed", THINK + "<answer>\\boxed{42}", "found 1 <answer> and 0 </answer>"),
    ("answer closed before opened", THINK + "</answer>\\boxed{1}<answer>", "</answer> before <answer>"),
    ("no boxed", THINK + "<answer>42</answer>", "no complete \\boxed{} inside <answer>"),
    ("unclosed boxed", THINK + "<answer>\\boxed{42</answer>", "no complete \\boxed{} inside <answer>"),
    (
        "boxed outside answer",
        THINK + "\\boxed{42}<answer>42</answer>",
        "no complete \\boxed{} inside <answer>",
    ),
    (
        "python without close",
        THINK + "<python>print(1)\n" + ANSWER,
        "tool call not completed: missing </python>",
    ),
    (
        "missing result",
        THINK + "<python>print(1)</python>\n" + THINK + ANSWER,
        "tool call not completed: missing <result>",
    ),
    (
        "result never closed",
        THINK + "<search>q</search><result>Doc 1" + ANSWER,
        "tool call not completed: missing </result>",
    ),
    (
        "result without call",
        THINK + "<result>\n42\n</result>" + ANSWER,
        "<result> at char 20 without a preceding tool call",
    ),
    (
        "close without open",
        THINK + "print(1)</python>" + ANSWER,
        "</python> at char 28 without a preceding tool call",
    ),
    (
        "mismatched close",
        THINK + "<python>x</search><result>1</result>" + ANSWER,
        "expected </python> but found </search> at char 29",
    ),
    (
        "call inside a call",
        THINK + "<python><search>q</search></python>" + ANSWER,
        "expected </python> but found <search> at char 28",
    ),
    (
        "unclosed function call",
        THINK + '<add>{"a": 40, "b": 2}\n<result>\n42\n</result>\n' + ANSWER,
        "<result> at char 43 without a preceding tool call",
    ),
    ("function call cut at the end", THINK + ADD + '<add>{"a": 40', "tool call not completed: missing </add>"),
    (
        "unclosed call of a function used before",
        THINK + ADD + '<add>{"a": 40, "b": 2}\n' + ANSWER,
        "tool call not completed: missing </add>",
    ),
    (
        "function call without result, the function used before",
        THINK + ADD + '<add>{"a": 1, "b": 1}</add>\n' + THINK + ANSWER,
        "tool call not completed: missing <result>",
    ),
    (
        "text between a function call and its result",
        THINK + '<add>{"a": 40, "b": 2}</add> so <result>\n42\n</result>' + ANSWER,
        "<result> at char 52 without a preceding tool call",
    ),
    (
        "function close without open",
        THINK + ADD + '{"a": 1}</add>\n<result>\nError\n</result>' + ANSWER,
        "</add> at char 75 without a preceding tool call",
    ),
    (
        "function call inside a python call",
        THINK + "<python>\n<add>1</add>\n</python>\n<result>\n1\n</result>" + ADD + ANSWER,
        "expected </python> but found <add> at char 29",
    ),
    (
        "answer used as a call",
        THINK + "<answer>\\boxed{42}</answer>\n<result>\n42\n</result>",
        "<result> at char 48 without a preceding tool call",
    ),
    (
        "think used as a call",
        "<think>plan</think>\n<result>\n42\n</result>" + ANSWER,
        "<result> at char 20 without a preceding tool call",
    ),
    (
        "retrieve used as a call",
        THINK + "<retrieve>q</retrieve>\n<result>\n42\n</result>" + ANSWER,
        "<result> at char 43 without a preceding tool call",
    ),
    (
        "result used as a call",
        THINK + ADD + "<result>\n1\n</result>" + ANSWER,
        "<result> at char 67 without a preceding tool call",
    ),
]


@pytest.mark.parametrize("text", [t for _, t in GOOD], ids=[n for n, _ in GOOD])
def test_well_formed_completions_pass(text):
    assert format_check(text) == (True, None)


@pytest.mark.parametrize("text,reason", [(t, r) for _, t, r in BAD], ids=[n for n, _, _ in BAD])
def test_each_broken_rule_is_named(text, reason):
    ok, why = format_check(text)
    assert not ok
    assert reason in why


def test_tools_used_ignores_tags_in_results():
    assert tools_used(THINK + PY + ANSWER) == {"python"}
    assert tools_used(THINK + SEARCH + PY + ANSWER) == {"python", "search"}
    assert tools_used(THINK + "<python>\nx\n</python><result>\n<search>\n</result>" + ANSWER) == {"python"}


def test_tools_used_names_function_tools():
    assert tools_used(THINK + ADD + ANSWER) == {"add"}
    assert tools_used(THINK + SEARCH + ADD + PY + ANSWER) == {"python", "search", "add"}
    assert tools_used(THINK + "<b>x</b>\n" + PY + ANSWER) == {"python"}  # not followed by a result: not a tool
    assert tools_used(THINK + "<python>\nx\n</python><result>\n<add>1</add>\n<result>\n</result>" + ANSWER) == {
        "python"
    }


def test_explicit_tool_tags():
    unanswered = THINK + '<add>{"a": 40, "b": 2}</add>\n' + ANSWER
    # By default a tag never followed by a result is ordinary text; named as a tool, its call needs one.
    assert format_check(unanswered) == (True, None)
    assert format_check(unanswered, tool_tags=["python", "add"]) == (
        False,
        "tool call not completed: missing <result>",
    )
    assert format_check(THINK + ADD + PY + ANSWER, tool_tags=("python", "search", "add")) == (True, None)
    # Only the given tags are tools: a call of another one is a result without a call.
    assert format_check(THINK + ADD + ANSWER, tool_tags=("python", "search")) == (
        False,
        "<result> at char 49 without a preceding tool call",
    )
    assert tools_used(THINK + ADD + PY + ANSWER, tool_tags=["add"]) == {"add"}


@pytest.mark.parametrize(
    "tags,error",
    [("add", TypeError), (["answer"], ValueError), (["a b"], ValueError), ([3], ValueError)],
    ids=["string", "reserved", "space", "not-a-string"],
)
def test_explicit_tool_tags_are_checked(tags, error):
    with pytest.raises(error):
        format_check(THINK + ANSWER, tool_tags=tags)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("\\boxed{42}", "42"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{a} then \\boxed{b{c}d}", "b{c}d"),
        ("\\boxed {x}", "x"),
        ("\\boxed{1} \\boxed{unclosed", "1"),
        ("no box", None),
    ],
)
def test_last_boxed_balances_braces(text, expected):
    assert last_boxed(text) == expected


def test_extract_prediction_prefers_the_answer_block():
    assert extract_prediction("\\boxed{1}<answer>\\boxed{2} or \\boxed{3}</answer>") == "3"
    assert extract_prediction("<answer> plain </answer>") == "plain"
    # A bare answer block wins over a boxed value elsewhere: a draft boxed while thinking is not the answer.
    assert extract_prediction("<think>\\boxed{5}</think><answer> 6 </answer>") == "6"
    assert extract_prediction("only \\boxed{7}") == "7"
    assert extract_prediction("nothing") is None


def test_completion_text_reads_both_forms():
    assert completion_text("plain") == "plain"
    assert completion_text([{"role": "assistant", "content": "a"}, {"role": "tool", "content": "b"}]) == "ab"
    assert completion_text([{"role": "assistant", "content": [{"type": "text", "text": "x"}]}]) == "x"


BLOCK = (
    "\n" + RETRIEVE_PREFACE + "\n<retrieve>\n<think>stored</think><answer>\\boxed{9}</answer>\n</retrieve>\n"
)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("A" + BLOCK + "B", "A\nB"),
        ("A" + BLOCK + "B" + BLOCK + "C", "A\nB\nC"),
        ("A <retrieve>x <retrieve>y</retrieve> z</retrieve>B", "A B"),
        ("A\n" + RETRIEVE_PREFACE + "\n<retrieve>\ncut by the length bud", "A\n"),
        ("stray </retrieve> kept", "stray </retrieve> kept"),
        ("no blocks", "no blocks"),
    ],
    ids=["one", "two", "nested", "unclosed", "stray-close", "none"],
)
def test_strip_retrieved_blocks(text, expected):
    assert strip_retrieved_blocks(text) == expected
