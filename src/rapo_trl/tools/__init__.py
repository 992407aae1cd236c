"""Tag-based tools for the policy: a sandboxed Python interpreter and a local-corpus search.

The policy calls a tool by writing ``<tag>content</tag>``; ``run_tool_calls`` runs a turn's calls
concurrently and turns every failure into an error result the model sees. See ``registry`` for how to
add a tool of your own.
"""

from .base import Tool, ToolCall, ToolError, run_tool_calls
from .python_tool import PythonTool
from .registry import tools_by_tag
from .search_tool import SearchTool

__all__ = ["PythonTool", "SearchTool", "Tool", "ToolCall", "ToolError", "run_tool_calls", "tools_by_tag"]
