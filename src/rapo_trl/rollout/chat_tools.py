"""JSON tool calls in the model's own chat template: the protocol of TRL's ``GRPOTrainer(tools=[fn])`` and
``environment_factory`` (docs/trl-integration.md, Environments and JSON tools).

A policy turn ends at the template's end-of-turn token (EOS). The turn's ids are parsed with TRL's ``parse_response``
(the tokenizer's response template: Qwen2.5/3, Llama 3.x, ...); a turn without a parseable tool call ends the rollout,
as in TRL, so a malformed call is scored as the plain text TRL falls back to. Each call runs the named function (a
standalone tool or a method of the row's environment) and its result comes back as the chat template renders a tool
message followed by the next assistant header: forced ids, computed from a fixed dummy conversation exactly as
``GRPOTrainer._get_tool_suffix_ids`` does, never by re-tokenizing the row.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from trl.chat_template_utils import (
    get_training_chat_template,
    is_chat_template_prefix_preserving,
    parse_response,
)

from rapo_trl.protocol import cap_text
from rapo_trl.tools.base import ToolError
from rapo_trl.tools.timed_call import DEFAULT_TIMEOUT_S, TimedCalls, call_here

ToolTable = Mapping[str, Callable]
"""The functions a row may call, by name (a function's ``__name__``, or an environment method's)."""


@dataclass
class CallResult:
    """One executed JSON tool call: the tool message the policy is shown, and whether the call failed."""

    message: dict
    """``{"role": "tool", "name": ..., "content": ...}``, as TRL appends it to the conversation."""
    error: str | None = None
    """The error text of a failed call (``None``: it ran)."""


def tool_table(tools: Sequence[Callable] | Mapping[str, Callable] | None) -> dict[str, Callable]:
    """``{name: function}`` of plain functions or bound methods, checked: each needs a ``__name__`` and names differ."""
    if isinstance(tools, Mapping):
        return dict(tools)
    table: dict[str, Callable] = {}
    for tool in tools or ():
        name = getattr(tool, "__name__", None)
        if not callable(tool) or not name:
            raise TypeError(f"{tool!r} is not a JSON tool: pass plain typed functions with docstrings (as for TRL's "
                            "GRPOTrainer(tools=[...])), or environment methods.")
        if name in table:
            raise ValueError(f"Two JSON tools share the name {name!r}; give each function its own name.")
        table[name] = tool
    return table


def training_chat_template(tokenizer) -> str | None:
    """The template GRPOTrainer given tools renders prompts and tool results with: TRL's prefix-preserving training
    template where the tokenizer's own is not (Qwen3's drops earlier turns' thinking once a tool message follows, so
    its tool results could not be appended as forced ids), else ``None``, the tokenizer's own. Whoever renders for a
    JSON-tool policy outside RL renders with it, so the policy sees the format it trains on."""
    if is_chat_template_prefix_preserving(tokenizer):
        return None
    return get_training_chat_template(tokenizer)


def environment_tools(environment) -> dict[str, Callable]:
    """The public methods of an environment instance, as TRL exposes them: every function defined on its class whose
    name does not start with ``_``, except ``reset`` and ``get_reward``."""
    return {name: getattr(environment, name) for name, _ in inspect.getmembers(type(environment), inspect.isfunction)
            if name not in ("reset", "get_reward") and not name.startswith("_")}


class ChatToolCalls:
    """Parses a turn's JSON tool calls, runs them, and renders their results as the chat template does.

    Args:
        tokenizer: the policy's tokenizer, with a response template or schema (``trl.chat_template_utils.
            add_response_schema`` sets one for the templates TRL knows).
        chat_template: the template to render tool messages with (TRL's training-safe one when the tokenizer's own
            is not prefix-preserving); ``None``: the tokenizer's.
        template_kwargs: extra ``apply_chat_template`` arguments (``GRPOConfig.chat_template_kwargs``).
        timeout: seconds a call may take, as a tag tool's: past it the call fails (its result an error, counted) and
            the rollout goes on; the function runs on in its thread (``rapo_trl.tools.timed_call``). ``None``: each
            call runs on the calling thread with no timeout, as TRL runs them.
    """

    def __init__(self, tokenizer, chat_template: str | None = None, template_kwargs: dict | None = None,
                 timeout: float | None = DEFAULT_TIMEOUT_S):
        if getattr(tokenizer, "response_template", None) is None and getattr(tokenizer, "response_schema", None) is None:
            from trl.chat_template_utils import add_response_schema

            try:
                add_response_schema(tokenizer)
            except ValueError as error:
                raise ValueError(
                    "JSON tool calls need a tokenizer that can parse its model's tool calls: set "
                    "tokenizer.response_template (transformers' response parsing) for this chat template, or use "
                    "tool_protocol='tags'. " + str(error)
                ) from None
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.template_kwargs = dict(template_kwargs or {})
        self.timeout = timeout
        self._calls: dict[str, TimedCalls] = {}  # per tool name: its calls still running past their timeout

    def parse(self, turn_ids: Sequence[int], prefix_ids: Sequence[int], tools: ToolTable) -> dict:
        """The turn as an assistant message (TRL's ``parse_response``: plain text when a call does not parse)."""
        return parse_response(self.tokenizer, list(turn_ids), prefix=list(prefix_ids), tools=list(tools.values()))

    def run(self, calls: Sequence[dict], tools: ToolTable) -> list[CallResult]:
        """Run one turn's calls in order (an environment's state carries from one to the next). A failure becomes
        ``{"error": "..."}`` as the tool's result, as TRL shows it; the rollout goes on."""
        results = []
        for call in calls:
            if call.get("type") != "function":
                error = f"Unsupported tool call type: {call.get('type')}"
                results.append(CallResult(_tool_message(call.get("name", "unknown"), {"error": error}), error))
                continue
            name, arguments = call["function"]["name"], call["function"].get("arguments", {})
            try:
                if name not in tools:
                    raise ValueError(f"Tool {name} not found.")
                output = self._call(name, tools[name], arguments)
            except Exception as error:  # noqa: BLE001 - the user's tool failing is the call's result, not the run's end
                # The function's own exception as TRL shows it; a timeout (no cause) as the ToolError says it.
                error = error.__cause__ if isinstance(error, ToolError) and error.__cause__ is not None else error
                results.append(CallResult(_tool_message(name, {"error": str(error)}), f"{type(error).__name__}: {error}"))
                continue
            results.append(CallResult(_tool_message(name, output)))
        return results

    def overdue_on(self, environment) -> bool:
        """Whether a call of one of ``environment``'s methods ran past its timeout and still runs: when it ends it
        changes the environment, whichever row then holds it."""
        return any(calls.overdue_on(environment) for calls in self._calls.values())

    def _call(self, name: str, function: Callable, arguments: dict):
        if self.timeout is None:
            return call_here(name, function, arguments)
        return self._calls.setdefault(name, TimedCalls(name, self.timeout)).call(function, [], arguments)

    def results_for(self, row, tool_calls: list[dict], tools: ToolTable, config) -> list[dict]:
        """The tool messages one turn's calls get, counted on ``row``: calls past ``config.max_tool_calls`` get its
        ``tool_limit_message``; failures are counted and named; text longer than ``config.max_result_chars`` is cut."""
        allowed = max(0, min(len(tool_calls), config.max_tool_calls - row.tool_calls))
        row.tool_calls += allowed
        started = time.perf_counter()
        results = self.run(tool_calls[:allowed], tools)
        row.tool_seconds += time.perf_counter() - started
        messages = []
        for result in results:
            if result.error is not None:
                row.tool_failures += 1
                row.tool_errors.append((result.message["name"], result.error[:200]))
            content = result.message["content"]
            messages.append({**result.message, "content": cap_text(content, config.max_result_chars)
                             if isinstance(content, str) else content})
        return messages + [_tool_message(call.get("function", {}).get("name", "unknown"), config.tool_limit_message)
                           for call in tool_calls[allowed:]]

    def suffix_ids(self, tool_messages: list[dict]) -> list[int]:
        """Ids the template renders after an assistant tool-call turn: the tool messages and the next assistant
        header. Computed as ``GRPOTrainer._get_tool_suffix_ids`` does: a dummy conversation rendered with and without
        the tool messages, the common prefix cut at its last EOS."""
        dummy = [
            {"role": "user", "content": "dummy"},
            {"role": "assistant", "content": "",
             "tool_calls": [{"type": "function", "function": {"name": tool_messages[0]["name"], "arguments": {}}}]},
        ]
        render = dict(tokenize=True, chat_template=self.chat_template, return_dict=False, **self.template_kwargs)
        prefix = list(self.tokenizer.apply_chat_template(dummy, add_generation_prompt=False, **render))
        full = list(self.tokenizer.apply_chat_template(dummy + tool_messages, add_generation_prompt=True, **render))
        eos_positions = [i for i, token in enumerate(prefix) if token == self.tokenizer.eos_token_id]
        if eos_positions:
            prefix = prefix[: eos_positions[-1] + 1]
        if full[: len(prefix)] != prefix:
            raise ValueError("The chat template is not prefix-preserving: rendering a tool message changed the tokens "
                             "before it, so its result cannot be appended as forced tokens.")
        return full[len(prefix):]


def _tool_message(name: str, output) -> dict:
    # A list stays a list (content blocks), anything else is shown as its str(), as TRL does.
    return {"role": "tool", "name": name, "content": output if isinstance(output, list) else str(output)}

