"""A turn's tool calls, read and run, their results appended as forced tokens: the two tool protocols.

Tags (the paper): the turn stopped at a tool's closing tag; its call is the text since the last opening tag, and
the tool's output comes back in ``RolloutConfig.result_template``. JSON (TRL's ``tools=`` and
``environment_factory``): the turn ended at the chat template's end-of-turn token; its calls are parsed from the
template's JSON, and their results come back as the template renders tool messages (``rollout/chat_tools.py``).

Each runner returns the rows whose every call was past ``max_tool_calls``: they were shown the limit notice and ran
no tool, so theirs is no tool step.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from rapo_trl.core.rows import RolloutRow
from rapo_trl.protocol import result_block
from rapo_trl.rollout.chat_tools import ChatToolCalls, ToolTable
from rapo_trl.rollout.config import RolloutConfig
from rapo_trl.rollout.sequence import append_forced
from rapo_trl.tools.base import Tool, ToolCall, run_tool_calls

TurnCall = tuple[int, str, str | list[dict] | None]
"""One row's call of a turn: ``(row, tag, content)`` with tags (content ``None``: no opening tag), or
``(row, "json", tool_calls)``."""


def extract_tool_call(text: str, stop_string: str) -> tuple[str, str | None]:
    """``(tag, content)`` of the call a turn ended with; content ``None`` when it has no opening tag.

    The turn stopped at its first closing tag, so it holds one call at most, and the call is what follows the last
    opening tag: an earlier one is the reasoning naming the tag, or a call written again before it closed. Code that
    spells the opening tag itself is cut there, and the policy sees the error of what follows: rarer in a math or
    search task than reasoning that names the tag, and the format reward fails both."""
    tag = stop_string[2:-1]
    end = text.rfind(stop_string)
    start = text.rfind(f"<{tag}>", 0, end)
    if start < 0:
        return tag, None
    return tag, text[start + len(tag) + 2 : end]


def run_tag_calls(rows: list[RolloutRow], calls: list[TurnCall], tools: dict[str, Tool], config: RolloutConfig,
                  encode: Callable[[str], list[int]]) -> set[int]:
    """Run the rows' tag calls (concurrently across rows) and append their results; returns the rows whose call was
    past ``max_tool_calls`` (shown the limit notice, no tool run)."""
    outputs: dict[int, ToolCall | str] = {}
    to_run: list[tuple[int, Tool, str]] = []
    limited = set()
    for i, tag, content in calls:
        row = rows[i]
        if row.tool_calls >= config.max_tool_calls:
            outputs[i] = config.tool_limit_message
            limited.add(i)
            continue
        row.tool_calls += 1
        if content is None:
            outputs[i] = ToolCall(tag, "", f"Error: </{tag}> without an opening <{tag}> tag.", False, 0.0)
        elif not content.strip():
            outputs[i] = ToolCall(tag, content, f"Error: empty <{tag}> call.", False, 0.0)
        else:
            to_run.append((i, tools[tag], content))
    for (i, _, _), result in zip(to_run, run_tool_calls([(t, c) for _, t, c in to_run], config.tool_workers)):
        outputs[i] = result
    for i, _, _ in calls:
        text = _shown_output(rows[i], outputs[i])
        block = result_block(text, config.result_template, config.max_result_chars)
        append_forced(rows[i], encode(block), "tool", config.max_completion_length)
    return limited


def _shown_output(row: RolloutRow, result: ToolCall | str) -> str:
    """What the policy is shown of a call: a run call's output, counted on the row, or the limit notice."""
    if not isinstance(result, ToolCall):
        return result
    row.tool_failures += int(not result.ok)
    if not result.ok:
        row.tool_errors.append((result.tag, error_line(result.output)))
    row.tool_seconds += result.seconds
    return result.output


def error_line(output: str) -> str:
    """The line of a failed call's output that names the error: a traceback's last line, not its header."""
    lines = [line.strip() for line in output.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def parse_json_turn(chat_tools: ChatToolCalls, row: RolloutRow, step_start: int, tools: ToolTable) -> list[dict]:
    """Parse the policy turn just sampled into the row's chat messages; the tool calls it makes (none when it
    makes none, or they do not parse: TRL then reads the turn as plain text)."""
    turn = row.completion_ids[step_start:]
    if not turn:
        return []
    # The parser reads the message from the last assistant header of prefix + turn: a retrieved block just before
    # the turn stays out of the prefix, so it is never read as the policy's words (or its calls).
    header = step_start
    for segment in reversed(row.segments[:-1]):
        if segment.kind != "retrieved" or segment.end != header:
            break
        header = segment.start
    message = chat_tools.parse(turn, row.prompt_ids + row.completion_ids[:header], tools)
    row.messages.append(message)
    return message.get("tool_calls") or []


def run_json_calls(chat_tools: ChatToolCalls, rows: list[RolloutRow], calls: list[TurnCall],
                   tables: list[ToolTable], config: RolloutConfig) -> set[int]:
    """Run each row's JSON calls (a row's in order; rows side by side, or one after another on this thread with
    ``json_tool_timeout`` None) and append their results as the chat template renders them; results that do not fit
    the completion budget end the row instead, as in TRL. Returns the rows whose every call was past
    ``max_tool_calls``."""
    limited = {i for i, _, _ in calls if rows[i].tool_calls >= config.max_tool_calls}

    def results(call: TurnCall) -> list[dict]:
        return chat_tools.results_for(rows[call[0]], call[2], tables[call[0]], config)

    if config.json_tool_timeout is None:  # TRL's way: on this thread, one row after another
        shown = [results(call) for call in calls]
    else:
        with ThreadPoolExecutor(max_workers=max(1, min(config.tool_workers, len(calls) or 1))) as pool:
            shown = list(pool.map(results, calls))
    for (i, _, _), messages in zip(calls, shown):
        row = rows[i]
        suffix = chat_tools.suffix_ids(messages)
        if len(row.completion_ids) + len(suffix) > config.max_completion_length:
            row.finished = True
            continue
        append_forced(row, suffix, "tool", config.max_completion_length)
        row.messages.extend(messages)
    return limited
