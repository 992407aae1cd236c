"""The CLI's training and eval rows teach exactly the recipe's tools, as to_rapo_rows(tools=...) does."""

from __future__ import annotations

import pytest

from rapo_trl.cli.arguments import RAPOScriptArguments
from rapo_trl.cli.common import tool_names, training_rows
from rapo_trl.tasks import PYTHON_SYSTEM_PROMPT


@pytest.mark.parametrize("task, tools", [("arithmetic", None), ("two_hop", None), ("word_problems", None),
                                         ("two_hop", ["python", "search"]), ("two_hop", ["search"])])
def test_rows_teach_the_recipes_tools(task, tools):
    script = RAPOScriptArguments(task=task, tools=tools, train_size=2)
    names = tool_names(script)
    system = training_rows(script, "train")[0]["prompt"][0]["content"]
    for tag in ("python", "search"):
        assert (f"<{tag}>" in system) == (tag in names), (names, system)
    if names == ["python"]:
        assert system == PYTHON_SYSTEM_PROMPT  # the short prompt the demo's store and warm start were built with
