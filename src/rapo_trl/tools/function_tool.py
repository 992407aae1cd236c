"""``FunctionTool``: a typed Python function with a docstring, called with RAPO's tag protocol.

The functions users pass to TRL's ``GRPOTrainer(tools=[...])`` carry over unchanged: the tag is the
function's name, and the policy calls it with its arguments as one JSON object::

    def add(a: int, b: int) -> int:
        \"\"\"Add two integers.

        Args:
            a: The first number.
            b: The second number.
        \"\"\"
        return a + b

    # the policy writes <add>{"a": 1, "b": 2}</add> and gets <result>\\n3\\n</result> back

The function is described with ``transformers.utils.get_json_schema``, the schema TRL's ``tools=``
renders, so it needs what TRL needs: a type hint on every argument and a Google-style docstring
describing each one. A function of exactly one parameter may also be called with a bare JSON value or
plain text (``<square>7</square>``, ``<lookup>Paris</lookup>``). Arguments are checked against the
signature and coerced to the annotated basic types where that is unambiguous (``"3"`` to 3 for an
``int``, 3 to 3.0 for a ``float``, ``"true"`` to ``True`` for a ``bool``), the values a ``**more: int`` takes
by its annotation (``**more: Any``: as given); a call that cannot be made raises ``ToolError`` with a
one-line message the policy sees. Async functions are awaited.

Each call runs in a daemon thread of its own and fails with ``ToolError`` past ``timeout``; ``max_overdue``
bounds how many may run on past it (``timed_call.py``).
"""

from __future__ import annotations

import inspect
import json
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from rapo_trl.protocol import RESERVED_TAGS

from .base import ToolError
from .timed_call import DEFAULT_TIMEOUT_S, TimedCalls

_ARTICLE = {
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "boolean": "true or false",
    "array": "a JSON array",
    "object": "a JSON object",
    "null": "null",
}
_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
_MAX_INT_DIGITS = sys.int_info.default_max_str_digits  # the most digits int() reads from text
logger = logging.getLogger(__name__)


class _NotCoercible(Exception):
    """A value that cannot be turned into one JSON-schema type."""


class _IntText(int):
    """A JSON integer that remembers how the policy wrote it (``"007"`` cannot be one, ``"-0"`` can)."""

    text: str


class _FloatText(float):
    """A JSON number with a fraction, an exponent or a constant (``3.10``, ``1e5``, ``NaN``), as the policy wrote
    it: for a string argument the text itself is the value, not ``str(3.1)``."""

    text: str


def _literal(kind: type, text: str) -> Any:
    value = kind(int(text) if kind is _IntText else float(text))
    value.text = text
    return value


def _loads(text: str) -> Any:
    """``json.loads``, numbers keeping their text (``_IntText``, ``_FloatText``) until ``_plain``."""
    return json.loads(text, parse_int=lambda t: _literal(_IntText, t), parse_float=lambda t: _literal(_FloatText, t),
                      parse_constant=lambda t: _literal(_FloatText, t))


def _plain(value: Any) -> Any:
    """``value`` with the numbers ``_loads`` made turned back into plain ``int`` and ``float``."""
    if isinstance(value, _IntText):
        return int(value)
    if isinstance(value, _FloatText):
        return float(value)
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


def _types(spec: dict) -> list[str]:
    kind = spec.get("type")
    if kind is None:
        return []
    return [kind] if isinstance(kind, str) else list(kind)


def _union_members(spec: dict) -> list[dict]:
    """The members of a union get_json_schema writes as "anyOf" (one holding a list, a tuple or a Literal)."""
    return [member for member in spec.get("anyOf", ()) if isinstance(member, dict)]


def _grouped(name: str) -> str:
    """A union's description in parentheses, so that what it describes stays one type: ``array of (integer or
    array of integer)``, where ``array of integer or array of integer`` would read as two kinds of array."""
    return f"({name})" if " or " in name else name


def describe_type(spec: dict) -> str:
    """A short human-readable type from a JSON-schema property (``"array of integer"``, ``"array [integer, string]"``
    for a tuple, ``"any"``)."""
    if "enum" in spec:
        return "one of " + ", ".join(json.dumps(value) for value in spec["enum"])
    # get_json_schema writes a union holding a list or a tuple as "anyOf" (its members keep their "items").
    names = [describe_type(member) for member in _union_members(spec)]
    for kind in _types(spec):
        if kind == "array" and isinstance(spec.get("prefixItems"), list):  # a tuple: one type per position
            names.append(f"array [{', '.join(describe_type(item) for item in spec['prefixItems'])}]")
        elif kind == "array" and isinstance(spec.get("items"), dict) and describe_type(spec["items"]) != "any":
            names.append(f"array of {_grouped(describe_type(spec['items']))}")
        elif kind == "object" and isinstance(spec.get("additionalProperties"), dict):
            names.append(f"object of {_grouped(describe_type(spec['additionalProperties']))}")
        else:
            names.append(kind)
    if spec.get("nullable") and "null" not in names:
        names.append("null")
    return " or ".join(names) or "any"


def _show(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _exact(value: Any, kind: str) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, {"string": str, "boolean": bool, "array": list, "object": dict}.get(kind, type(None)))


def _whole_number(text: str) -> int:
    """The integer ``text`` writes (``"3"``, ``"3.0"``, ``"1e3"``), read exactly: through a float,
    ``12345678901234567890.0`` would become ...7168 and ``3.0000000000000001`` would pass for 3."""
    try:
        number = Decimal(text.strip())
    except InvalidOperation:
        raise _NotCoercible from None
    # Past int's default digit limit the value is no call's argument, and int() of it would take long.
    if not number.is_finite() or number.adjusted() >= _MAX_INT_DIGITS or number != number.to_integral_value():
        raise _NotCoercible
    return int(number)


def _convert(value: Any, kind: str) -> Any:
    """``value`` as ``kind`` when the conversion loses nothing; raises ``_NotCoercible`` otherwise."""
    if isinstance(value, bool) and kind != "boolean":
        raise _NotCoercible
    if kind == "integer":
        if isinstance(value, float):
            return _whole_number(getattr(value, "text", None) or repr(value))
        if isinstance(value, str):
            return _whole_number(value)
    elif kind == "number":
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                raise _NotCoercible from None
    elif kind == "string":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return getattr(value, "text", None) or str(value)  # 3.10 as written, not "3.1"
    elif kind == "boolean":
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
    elif kind in ("array", "object") and isinstance(value, str):
        try:
            parsed = _loads(value)
        except ValueError:
            raise _NotCoercible from None
        if _exact(parsed, kind):
            return parsed
    raise _NotCoercible


def coerce(value: Any, spec: dict, where: str) -> Any:
    """``value`` checked against the JSON-schema property ``spec`` and coerced to its type.

    ``where`` names the value in the error (``"argument 'a'"``). Raises ``ToolError``.
    """
    return _coerce(value, spec, where, convert=True)


def _coerce(value: Any, spec: dict, where: str, convert: bool) -> Any:
    """``coerce``; with ``convert=False`` only a value that already has the type (all through) passes."""
    members = _union_members(spec)
    kinds = _types(spec)
    if value is None and (spec.get("nullable") or "null" in kinds or not (kinds or members)):
        return None
    if members:
        return _coerce_to_union(value, members, spec, where, convert)
    if kinds:
        result, found = None, False
        for kind in kinds:  # a value that already has one of the types keeps it
            if _exact(value, kind):
                result, found = (float(value) if kind == "number" else value), True
                break
        for kind in kinds if not found and convert else ():
            try:
                result, found = _convert(value, kind), True
                break
            except _NotCoercible:
                continue
        if not found:
            wanted = " or ".join(_ARTICLE.get(kind, kind) for kind in kinds)
            raise ToolError(f"{where} must be {wanted}, got {_show(value)}")
        value = result
        if isinstance(value, list) and isinstance(spec.get("prefixItems"), list):
            value = _coerce_fixed_items(value, spec["prefixItems"], where, convert)
        elif isinstance(value, list) and isinstance(spec.get("items"), dict):
            value = [_coerce(item, spec["items"], f"{where} item {i}", convert) for i, item in enumerate(value)]
        elif isinstance(value, dict) and isinstance(spec.get("additionalProperties"), dict):
            value = {
                key: _coerce(item, spec["additionalProperties"], f"{where} key {json.dumps(key)}", convert)
                for key, item in value.items()
            }
    if "enum" in spec and value not in spec["enum"]:
        raise ToolError(f"{where} must be {describe_type({'enum': spec['enum']})}, got {_show(value)}")
    return value


def _coerce_to_union(value: Any, members: list[dict], spec: dict, where: str, convert: bool) -> Any:
    """A union get_json_schema writes as "anyOf" (``int | list[int]``, ``tuple[int, int] | list[int]``): the
    first member that takes the value as written, else the first it can be coerced to, as for a plain type."""
    for member in members:
        try:
            return _coerce(value, member, where, convert=False)
        except ToolError:
            continue
    errors = []
    for member in members if convert else ():
        try:
            return _coerce(value, member, where, convert=True)
        except ToolError as error:
            errors.append((member, error))
    # Where one member has the value's JSON type, its own error says what is wrong inside (an item, a length).
    same_kind = [error for member, error in errors if any(_exact(value, kind) for kind in _types(member))]
    if len(same_kind) == 1:
        raise same_kind[0]
    wanted = [_accepted(member) for member in members] + (["null"] if spec.get("nullable") else [])
    raise ToolError(f"{where} must be {' or '.join(wanted)}, got {_show(value)}")


def _accepted(spec: dict) -> str:
    """``describe_type`` as an error names a value (``"an integer"``, ``"a JSON array of integer"``)."""
    name = describe_type(spec)
    if name in _ARTICLE:
        return _ARTICLE[name]
    return f"a JSON {name}" if name.startswith(("array", "object")) else name


def _coerce_fixed_items(value: list, item_specs: list, where: str, convert: bool) -> list:
    """A ``tuple[int, str]`` argument (JSON schema ``prefixItems``): exactly one value per position, each coerced
    to its own type. Kept a list, as JSON gives it, so a call that already worked passes the same value."""
    if len(value) != len(item_specs):
        kinds = ", ".join(describe_type(item) for item in item_specs)
        count = f"{len(value)} item{'s' if len(value) != 1 else ''}"
        raise ToolError(f"{where} must be a JSON array of {len(item_specs)} items ({kinds}), got {count}: {_show(value)}")
    return [
        _coerce(item, item_spec, f"{where} item {i}", convert)
        for i, (item, item_spec) in enumerate(zip(value, item_specs))
    ]


@dataclass
class FunctionTool:
    """A plain Python function as a tag tool: ``<name>{"arg": value}</name>`` calls ``name(arg=value)``.

    Args:
        function: a function (sync or async) with a type hint on every argument and a Google-style
            docstring, as for TRL's ``GRPOTrainer(tools=[...])``. Its ``__name__`` is the tag.
        timeout: seconds a call may take; past it the call fails with a ``ToolError`` the policy sees.
            The function runs in a daemon thread of its own and is not interrupted: it runs on, but
            does not hold up the process's exit.
        max_overdue: calls that may still be running past their timeout; while this many are, new
            calls fail at once with a ``ToolError``, until one of them ends. A function that never
            returns thus holds at most this many threads (plus the calls made at the same moment).

    ``schema`` is the function's JSON schema from ``transformers.utils.get_json_schema``; ``run``
    returns the function's value with ``str()``, dicts and lists as JSON (with ``str()`` too where JSON cannot write
    them: tuple keys, a cycle).
    """

    function: Callable[..., Any]
    timeout: float = DEFAULT_TIMEOUT_S
    max_overdue: int = 4
    tag: str = field(init=False)
    schema: dict = field(init=False, repr=False)

    def __post_init__(self):
        name = getattr(self.function, "__name__", None)
        if not callable(self.function) or not isinstance(name, str):
            raise TypeError(f"FunctionTool needs a named function, got {self.function!r}.")
        if not self.timeout > 0 or self.max_overdue < 1:
            raise ValueError(f"FunctionTool {name!r}: timeout must be > 0 and max_overdue >= 1, got "
                             f"{self.timeout!r} and {self.max_overdue!r}.")
        if name in RESERVED_TAGS:
            raise ValueError(
                f"Function {name!r} cannot be a tool: <{name}> is reserved by the prompt format "
                f"({', '.join(sorted(RESERVED_TAGS))}). Rename the function."
            )
        from transformers.utils import get_json_schema

        try:
            self.schema = get_json_schema(self.function)
        except Exception as error:  # transformers' TypeHintParsingException / DocstringParsingException
            raise TypeError(
                f"Function {name!r} cannot be described as a tool: {error} Function tools need a type hint on "
                "every argument and a Google-style docstring with an Args: line per argument, as for "
                "GRPOTrainer's tools=."
            ) from error
        self.tag = name
        self._signature = inspect.signature(self.function)
        self._params = [p for p in self._signature.parameters.values() if p.kind not in _VARIADIC]
        var_keyword = next(
            (p for p in self._signature.parameters.values() if p.kind is inspect.Parameter.VAR_KEYWORD), None
        )
        self._takes_any_keyword = var_keyword is not None
        # get_json_schema describes ``**more: int`` under its name by the type of each value it takes.
        self._extra_spec = self.properties.get(var_keyword.name, {}) if var_keyword else {}
        self._calls = TimedCalls(name, self.timeout, self.max_overdue)

    # ------------------------------------------------------------------ description

    @property
    def description(self) -> str:
        """The docstring's description, as in the schema."""
        return self.schema["function"].get("description", "")

    @property
    def properties(self) -> dict[str, dict]:
        """``{argument: JSON-schema property}`` (type and the docstring's description)."""
        return self.schema["function"].get("parameters", {}).get("properties", {})

    def call_format(self) -> str:
        """How the policy calls this tool: ``<add>{"a": ..., "b": ...}</add>``."""
        arguments = ", ".join(f"{json.dumps(p.name)}: ..." for p in self._params)
        return f"<{self.tag}>{{{arguments}}}</{self.tag}>"

    def describe(self) -> str:
        """A prompt block: the call format, the description, each argument and what it returns."""
        lines = [self.call_format()]
        if self.description:
            lines.append(self.description)
        if self._params:
            lines.append("Arguments:")
        for param in self._params:
            spec = self.properties.get(param.name, {})
            kind = describe_type(spec)
            if param.default is not inspect.Parameter.empty:
                kind += f", optional, default {_show(param.default)}"
            text = spec.get("description", "")
            lines.append(f"- {param.name} ({kind})" + (f": {text}" if text else ""))
        returns = self.schema["function"].get("return", {}).get("description")
        if returns:
            lines.append(f"Returns: {returns}")
        return "\n".join(lines)

    # ------------------------------------------------------------------ calling

    def parse_arguments(self, text: str) -> dict[str, Any]:
        """The call's text as ``{parameter: value}``, checked and coerced; raises ``ToolError``."""
        names = [p.name for p in self._params]
        single = self._params[0] if len(self._params) == 1 else None
        text = text.strip()
        try:
            value = _loads(text)
        except ValueError as error:
            if single is None:
                example = self.call_format()[len(self.tag) + 2 : -len(self.tag) - 3]
                raise ToolError(
                    f"{self.tag}: expected one JSON object of arguments like {example}; "
                    f"invalid JSON: {error.msg} (char {error.pos})"
                ) from None
            value = text  # plain text for a one-parameter function
        single_spec = self.properties.get(single.name, {}) if single else {}
        single_kinds = [kind for spec in [single_spec, *_union_members(single_spec)] for kind in _types(spec)]
        as_mapping = isinstance(value, dict) and (
            single is None or set(value) <= set(names) or (single_kinds and "object" not in single_kinds)
        )
        if as_mapping:
            arguments = value
        elif single is not None:
            arguments = {single.name: value}
        else:
            example = self.call_format()[len(self.tag) + 2 : -len(self.tag) - 3]
            raise ToolError(f"{self.tag}: expected one JSON object of arguments like {example}, got {_show(value)}")
        unknown = [key for key in arguments if key not in names]
        if unknown and not self._takes_any_keyword:
            known = ", ".join(names) or "none"
            raise ToolError(
                f"{self.tag}: unknown argument{'s' if len(unknown) > 1 else ''} "
                f"{', '.join(repr(k) for k in unknown)}; its arguments are: {known}"
            )
        missing = [p.name for p in self._params if p.default is inspect.Parameter.empty and p.name not in arguments]
        if missing:
            raise ToolError(
                f"{self.tag}: missing required argument{'s' if len(missing) > 1 else ''} "
                f"{', '.join(repr(m) for m in missing)}"
            )
        specs = {name: self.properties.get(name, {}) for name in names}
        return {
            key: _plain(coerce(item, specs.get(key, self._extra_spec), f"{self.tag}: argument {key!r}"))
            for key, item in arguments.items()
        }

    def run(self, text: str) -> str:
        arguments = self.parse_arguments(text)
        only = [p for p in self._params if p.kind is inspect.Parameter.POSITIONAL_ONLY]
        given = max((k for k, p in enumerate(only) if p.name in arguments), default=-1)
        # An omitted one before a given one is passed its default (parse_arguments refused a missing required
        # one): left out, every later value would go to the parameter before its own.
        positional = [arguments.pop(p.name) if p.name in arguments else p.default for p in only[: given + 1]]
        result = self._call(positional, arguments)
        if isinstance(result, (dict, list, tuple)):
            try:
                return json.dumps(result, ensure_ascii=False, default=str)
            except (TypeError, ValueError):  # keys JSON cannot hold (a tuple), a cycle: the call still succeeded
                pass
        return str(result)

    def _call(self, positional: list, arguments: dict) -> Any:
        """The function's value; raises ``ToolError`` for its exceptions and past ``timeout`` (``timed_call.py``)."""
        return self._calls.call(self.function, positional, arguments)


def as_tool(obj: Any) -> Any:
    """``obj`` itself when it is a tag tool (has a ``tag``), a ``FunctionTool`` when it is a plain callable."""
    if callable(obj) and not hasattr(obj, "tag"):
        return FunctionTool(obj)
    return obj


def function_tools_prompt(tools) -> str:
    """The system-prompt section describing the function tools among ``tools`` ("" when there are none).

    ``tools`` may hold plain functions (wrapped as ``FunctionTool``) and other tools (skipped: the
    default prompts already teach ``<python>`` and ``<search>``).
    """
    functions = [tool for tool in map(as_tool, tools or ()) if isinstance(tool, FunctionTool)]
    if not functions:
        return ""
    head = ("You can call these functions. Write the arguments as one JSON object between the function's tags; "
            "its output comes back between <result> and </result>.")
    return "\n\n".join([head, *(tool.describe() for tool in functions)])
