"""The system prompt that teaches the tag protocol RAPO's rollouts and rewards expect."""

import logging

logger = logging.getLogger(__name__)

SYSTEM_PROMPT = """You are a careful problem solver with two tools: a Python interpreter and a search engine.

Work in steps, writing everything in one reply:
- Reason inside <think> ... </think> before acting and again after each tool result.
- To run code, write it between <python> and </python>. Print what you want to see.
- To look something up, write a short query between <search> and </search>.
- After each tool call, stop writing: the output is returned to you between <result> and </result>.
- Use the tools whenever a calculation is not trivial or a fact is not certain. Do not invent tool results.
- Finish with exactly one <answer> ... </answer> that contains the final answer in \\boxed{...}.

Example of the format:
<think>I need to multiply two large numbers, so I will use Python.</think>
<python>
print(4821 * 7315)
</python>
<result>
35265615
</result>
<think>The product is 35265615.</think>
<answer>\\boxed{35265615}</answer>"""

PYTHON_SYSTEM_PROMPT = """Solve the problem with the Python tool, in one reply:
<think>your plan</think>
<python>
code that prints the result
</python>
The output comes back between <result> and </result>. Then:
<think>what it means</think>
<answer>\\boxed{final answer}</answer>"""
"""A short prompt for python-only tasks: a third of ``SYSTEM_PROMPT``'s tokens, so small models on a CPU
spend their compute on the question and the answer, not on prefilling the instructions."""

TOOLS_SYSTEM_PROMPT = """You are a careful problem solver with tools.

Work in steps, writing everything in one reply:
- Reason inside <think> ... </think> before acting and again after each tool result.
- To call a tool, write the call between its tags, as described below.
- After each tool call, stop writing: the output is returned to you between <result> and </result>.
- Use the tools whenever a step is not trivial. Do not invent tool results.
- Finish with exactly one <answer> ... </answer> that contains the final answer in \\boxed{...}."""
"""The protocol without ``<python>``/``<search>``: the base of ``system_prompt_for`` when every tool is a
function tool (the section describing them follows it)."""


SEARCH_SYSTEM_PROMPT = """You are a careful problem solver with one tool: a search engine.

Work in steps, writing everything in one reply:
- Reason inside <think> ... </think> before acting and again after each tool result.
- To look something up, write a short query between <search> and </search>.
- After each search, stop writing: the results are returned to you between <result> and </result>.
- Search whenever a fact is not certain. Do not invent search results.
- Finish with exactly one <answer> ... </answer> that contains the final answer in \\boxed{...}."""
"""The protocol for a search-only agent."""

NO_TOOLS_SYSTEM_PROMPT = """You are a careful problem solver.
Reason inside <think> ... </think>, then finish with exactly one <answer> ... </answer> that contains the final
answer in \\boxed{...}."""
"""The protocol when the trainer runs no tool at all."""

_PROMPT_FOR_BUILTIN_TOOLS = {
    frozenset({"python", "search"}): SYSTEM_PROMPT,
    frozenset({"python"}): PYTHON_SYSTEM_PROMPT,
    frozenset({"search"}): SEARCH_SYSTEM_PROMPT,
}


def prompt_for_builtin_tools(tags) -> str | None:
    """The prompt teaching exactly the built-in tools named in ``tags`` (None when it names none of them)."""
    from rapo_trl.protocol import TOOL_TAGS

    return _PROMPT_FOR_BUILTIN_TOOLS.get(frozenset(tags) & frozenset(TOOL_TAGS))


def system_prompt_for(tools, base: str | None = None) -> str:
    """A system prompt that teaches the tag protocol for exactly the tools in ``tools``.

    ``tools`` is what ``RAPOTrainer(tools=...)`` takes: tag tools and plain typed functions. ``base`` defaults
    to the prompt for the built-in tools among them: ``SYSTEM_PROMPT`` for ``<python>`` and ``<search>``,
    ``PYTHON_SYSTEM_PROMPT`` or ``SEARCH_SYSTEM_PROMPT`` for one of them, ``TOOLS_SYSTEM_PROMPT`` for function
    tools or tools of your own only, ``NO_TOOLS_SYSTEM_PROMPT`` for none. The function-tool section (each function's
    call format ``<name>{"arg": ...}</name>``, its docstring description and its arguments with their types, see
    ``rapo_trl.tools.function_tools_prompt``) follows ``base``, then one naming each tool of your own (a tag tool
    other than ``<python>``/``<search>``) with its ``description`` attribute, what to write between its tags.
    """
    from rapo_trl.protocol import TOOL_TAGS
    from rapo_trl.tools.function_tool import FunctionTool, as_tool, function_tools_prompt

    tools = list(tools or ())
    section = function_tools_prompt(tools)
    own = [tool for tool in map(as_tool, tools)
           if not isinstance(tool, FunctionTool) and getattr(tool, "tag", None) not in TOOL_TAGS]
    own_section = _own_tools_prompt(own)
    if base is None:
        # A function named python or search is taught by the section, as JSON: not as the built-in tool's code/query.
        tags = (getattr(tool, "tag", None) for tool in tools if not isinstance(tool, FunctionTool))
        base = prompt_for_builtin_tools(tags) or (
            TOOLS_SYSTEM_PROMPT if section or own_section else NO_TOOLS_SYSTEM_PROMPT)
    return "\n\n".join(part for part in (base, section, own_section) if part)


def with_instructions(system_prompt: str | None, instructions: str | None) -> str | None:
    """A row's system message: ``system_prompt`` (the protocol teaching the tools) followed by the row's own
    ``instructions`` (a conversation's system turn), so that the policy sees both: the instructions alone would teach
    no tool and no ``<answer>`` format, the protocol alone would drop what the data's author asked of the model.
    None when there is neither."""
    parts = [part.strip() for part in (system_prompt, instructions) if part and part.strip()]
    return "\n\n".join(parts) or None


def _own_tools_prompt(tools) -> str:
    """The section naming tag tools of the user's own: each one's tags and its ``description`` ("" for none)."""
    if not tools:
        return ""
    blocks = []
    for tool in tools:
        description = getattr(tool, "description", None)
        if not isinstance(description, str) or not description.strip():
            logger.warning("system_prompt_for: the tool %s (<%s>) has no `description`, so the prompt names its tags "
                           "but cannot say what to write between them. Give it a description attribute (a string).",
                           type(tool).__name__, tool.tag)
            description = ""
        blocks.append(f"<{tool.tag}>...</{tool.tag}>" + (f"\n{description.strip()}" if description.strip() else ""))
    head = ("You can call these tools. Write the tool's input between its tags; its output comes back between "
            "<result> and </result>.")
    return "\n\n".join([head, *blocks])
