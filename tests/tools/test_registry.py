"""tools_by_tag validation and a user-defined tool going through the runner."""

from __future__ import annotations

import time

import pytest

from rapo_trl.tools import PythonTool, ToolError, run_tool_calls, tools_by_tag


class Echo:
    tag = "echo"
    timeout = 1.0

    def run(self, text: str) -> str:
        if not text:
            raise ToolError("nothing to echo")
        return text.upper()


class Sleeper:
    tag = "sleep"
    timeout = 0.2

    def run(self, text: str) -> str:
        time.sleep(float(text))
        return "woke"


def test_tools_by_tag_indexes_tools():
    python, echo = PythonTool(), Echo()
    assert tools_by_tag([python, echo]) == {"python": python, "echo": echo}
    assert tools_by_tag(None) == {}


@pytest.mark.parametrize(
    ("tools", "error", "match"),
    [
        ([Echo(), Echo()], ValueError, "share the tag 'echo'"),
        ([type("Bad", (Echo,), {"tag": "has space"})()], ValueError, "Invalid tool tag"),
        ([type("Bad", (Echo,), {"tag": "</x>"})()], ValueError, "Invalid tool tag"),
        ([type("Bad", (Echo,), {"tag": "answer"})()], ValueError, "reserved"),
        ([type("Bad", (Echo,), {"timeout": 0})()], ValueError, "positive timeout"),
        ([object()], TypeError, "is not a tool"),
    ],
)
def test_invalid_tools_are_refused(tools, error, match):
    with pytest.raises(error, match=match):
        tools_by_tag(tools)


def test_custom_tool_results_and_failures():
    calls = run_tool_calls([(Echo(), "hi"), (Echo(), ""), (Sleeper(), "0")])
    assert [(c.tag, c.ok, c.output) for c in calls] == [
        ("echo", True, "HI"),
        ("echo", False, "Error: nothing to echo"),
        ("sleep", True, "woke"),
    ]
