"""Which text of a tag turn is its call: the turn stops at the first closing tag, the call is what follows the last
opening tag before it."""

from __future__ import annotations

import pytest

from rapo_trl.rewards import format_check
from rapo_trl.rollout import extract_tool_call
from tests.helpers.fakes import make_engine
from tests.helpers.scripted import Turn

CODE = "\nprint(3 * 4)\n"


@pytest.mark.parametrize(
    ("turn", "content"),
    [
        (f"<think>Multiply.</think>\n<python>{CODE}</python>", CODE),
        # the tag named in the reasoning is no call: the code after the opening tag written last is
        (f"<think>I will use <python> to multiply.</think>\n<python>{CODE}</python>", CODE),
        (f"<think>Multiply.</think>\n<python>\n<python>{CODE}</python>", CODE),  # the opening tag written twice
        # a call left unclosed and written again: the one that reached its closing tag runs
        (f"<python>\nx = 3\n<python>{CODE}</python>", CODE),
        # the stop string may end inside a token that runs on past it
        (f"<python>{CODE}</python>\n", CODE),
        ("<think>Multiply.</think>\nprint(3 * 4)\n</python>", None),
    ],
)
def test_the_call_is_the_text_after_the_last_opening_tag(turn, content):
    assert extract_tool_call(turn, "</python>") == ("python", content)


def test_an_opening_tag_inside_the_call_starts_it():
    # The cost of reading past a tag the reasoning names: code that spells the opening tag itself is cut at it,
    # and the policy sees the error of what follows. The format reward fails such a completion either way (the tag
    # opens a second call before the first closes), as it does one that names the tag in its reasoning.
    turn = '<think>Print the tag.</think>\n<python>\nprint("<python>")\n</python>'
    assert extract_tool_call(turn, "</python>") == ("python", '")\n')
    named = f"<think>I will use <python> to multiply.</think>\n<python>{CODE}</python>"
    for completion in (turn, named):
        ok, reason = format_check(f"{completion}<result>x</result><answer>\\boxed{{1}}</answer>")
        assert not ok and reason.startswith("expected </python> but found <python>")


def test_a_turn_with_two_calls_runs_the_first_the_second_is_never_sampled(tiny_model):
    first, second = "<python>1 + 1</python>", "<python>2 + 2</python>"
    engine, prompts, tok = make_engine(tiny_model, [[Turn(f"<think>t</think>{first}\n{second}"), Turn("end")]])
    (row,) = engine.run(prompts, hybrid=[False])
    assert engine.tools["python"].seen == ["1 + 1"]
    text = tok.decode(row.completion_ids)
    assert first in text and second not in text and row.tool_calls == 1
