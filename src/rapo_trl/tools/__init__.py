"""Tag-based tools for the policy: a sandboxed Python interpreter, a local-corpus search, and plain
typed functions (``FunctionTool``, as TRL's ``tools=`` takes them).

The policy calls a tool by writing ``<tag>content</tag>``; ``run_tool_calls`` runs a turn's calls
concurrently and turns every failure into an error result the model sees. See ``registry`` for how to
add a tool of your own.
"""

from .base import Tool, ToolCall, ToolError, run_tool_calls
from .function_tool import FunctionTool, as_tool, function_tools_prompt
from .python_tool import PythonTool
from .registry import tools_by_tag
from .search_tool import SearchTool

__all__ = [
    "FunctionTool",
    "PythonTool",
    "SearchTool",
    "Tool",
    "ToolCall",
    "ToolError",
    "as_tool",
    "function_tools_prompt",
    "run_tool_calls",
    "tools_by_tag",
]
