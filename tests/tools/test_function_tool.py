"""FunctionTool: TRL-style typed functions as tag tools (parsing, coercion, errors, prompt, rollouts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading

import pytest
from datasets import Dataset
from transformers.utils import get_json_schema

from rapo_trl.rollout import HybridRolloutEngine
from rapo_trl.tasks import (
    PYTHON_SYSTEM_PROMPT,
    SYSTEM_PROMPT,
    TOOLS_SYSTEM_PROMPT,
    system_prompt_for,
    to_rapo_rows,
)
from rapo_trl.tools import (
    FunctionTool,
    PythonTool,
    ToolError,
    as_tool,
    function_tools_prompt,
    run_tool_calls,
    tools_by_tag,
)
from tests.helpers.fakes import EchoTool, encode, make_engine
from tests.helpers.scripted import Turn


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.

    Returns:
        The sum of a and b.
    """
    return a + b


def shout(text: str) -> str:
    """Repeat a text in capitals.

    Args:
        text: What to repeat.
    """
    return text.upper()


def square(x: int) -> int:
    """Square an integer.

    Args:
        x: The number to square.
    """
    return x * x


def kinds(i: int, f: float, s: str, b: bool, xs: list[int], d: dict, maybe: int | None = None) -> list:
    """Echo each argument with the name of its Python type.

    Args:
        i: an integer
        f: a float
        s: a string
        b: a flag
        xs: integers
        d: a mapping
        maybe: an optional integer
    """
    return [[value, type(value).__name__] for value in (i, f, s, b, xs, d, maybe)]


def divide(a: float, b: float) -> float:
    """Divide a by b.

    Args:
        a: The dividend.
        b: The divisor.
    """
    return a / b


def city(name: str) -> dict:
    """Facts about a city.

    Args:
        name: The city's name.
    """
    return {"name": name, "letters": len(name)}


def answer(text: str) -> str:
    """A function named like a reserved tag.

    Args:
        text: anything
    """
    return text


async def double(x: float) -> float:
    """Double a number, asynchronously.

    Args:
        x: The number.
    """
    return 2 * x


def test_tag_schema_and_json_object_call():
    tool = FunctionTool(add)
    assert tool.tag == "add" and tool.timeout > 0
    assert tool.schema == get_json_schema(add)  # what TRL's tools= renders
    assert tool.run('{"a": 1, "b": 2}') == "3"
    assert tool.run(' {"b": 10, "a": -4}\n') == "6"


def test_single_parameter_takes_a_bare_value_or_plain_text():
    assert FunctionTool(square).run("7") == "49"
    assert FunctionTool(square).run('{"x": 7}') == "49"
    assert FunctionTool(shout).run("hello world") == "HELLO WORLD"  # not JSON: the text itself
    assert FunctionTool(shout).run('"quoted"') == "QUOTED"  # a JSON string
    assert FunctionTool(shout).run("42") == "42"  # a JSON number, coerced to str


def test_a_number_written_for_a_string_argument_keeps_its_text():
    # 3.10 is a version, not 3.1: the text the policy wrote is the string, in plain text or in a JSON object.
    assert FunctionTool(shout).run("3.10") == "3.10"
    assert FunctionTool(shout).run("1e5") == "1E5"
    assert FunctionTool(shout).run("-0") == "-0"
    assert FunctionTool(shout).run('{"text": 2.50}') == "2.50"
    out = json.loads(FunctionTool(kinds).run(json.dumps({"i": 1, "f": 1, "s": "x", "b": True, "xs": [], "d": {}})
                                             .replace('"s": "x"', '"s": 1.10').replace('"d": {}', '"d": {"k": 1.0}')))
    assert out[2] == ["1.10", "str"] and out[1] == [1.0, "float"] and out[5] == [{"k": 1.0}, "dict"]


def test_arguments_are_coerced_to_the_annotated_types():
    call = {"i": "3", "f": 2, "s": 42, "b": "true", "xs": ["1", 2.0], "d": '{"k": 1}'}
    out = json.loads(FunctionTool(kinds).run(json.dumps(call)))
    assert out == [[3, "int"], [2.0, "float"], ["42", "str"], [True, "bool"], [[1, 2], "list"],
                   [{"k": 1}, "dict"], [None, "NoneType"]]
    call = {"i": 4.0, "f": "0.5", "s": "x", "b": 0, "xs": "[5]", "d": {}, "maybe": "7"}
    out = json.loads(FunctionTool(kinds).run(json.dumps(call)))
    assert out == [[4, "int"], [0.5, "float"], ["x", "str"], [False, "bool"], [[5], "list"],
                   [{}, "dict"], [7, "int"]]


def test_an_integer_written_with_a_fraction_is_read_exactly():
    # through a float, 12345678901234567890.0 would be 12345678901234567168, and 3.0000000000000001 would be 3
    assert FunctionTool(square).run('{"x": 12345678901234567890.0}') == str(12345678901234567890**2)
    assert FunctionTool(square).run('"9007199254740993.0"') == str(9007199254740993**2)
    assert FunctionTool(square).run("1e3") == "1000000"
    with pytest.raises(ToolError, match="argument 'x' must be an integer"):
        FunctionTool(square).run("3.0000000000000001")
    with pytest.raises(ToolError, match="argument 'x' must be an integer"):
        FunctionTool(square).run('"1e999999999"')


def scores(name: str, **points: int) -> list:
    """Echo each score a player got with the name of its Python type.

    Args:
        name: The player.
        points: Points by round.
    """
    return [name, [[key, value, type(value).__name__] for key, value in points.items()]]


def test_values_taken_by_kwargs_are_coerced_to_its_annotation():
    out = json.loads(FunctionTool(scores).run('{"name": 7, "r1": "3", "r2": 4.0, "points": 5}'))
    assert out == ["7", [["r1", 3, "int"], ["r2", 4, "int"], ["points", 5, "int"]]]
    with pytest.raises(ToolError, match="argument 'r1' must be an integer"):
        FunctionTool(scores).run('{"name": "a", "r1": "three"}')


def clamp(low: int = 0, high: int = 10, /, value: int = 5) -> list:
    """Echo the bounds and the value.

    Args:
        low: The lower bound.
        high: The upper bound.
        value: The value.
    """
    return [low, high, value]


def test_positional_only_arguments_reach_their_own_parameters():
    # high given without low must not be passed as low: an omitted positional-only argument keeps its default.
    assert FunctionTool(clamp).run('{"high": 3}') == "[0, 3, 5]"
    assert FunctionTool(clamp).run('{"low": 2, "value": 7}') == "[2, 10, 7]"
    assert FunctionTool(clamp).run('{"value": 1}') == "[0, 10, 1]"
    assert FunctionTool(clamp).run('{"high": 4, "low": 1}') == "[1, 4, 5]"


def test_return_values_are_str_or_json():
    assert FunctionTool(city).run("Paris") == '{"name": "Paris", "letters": 5}'
    assert FunctionTool(divide).run('{"a": 1, "b": 4}') == "0.25"


def pairs() -> dict:
    """Distances between pairs of points."""
    return {(1, 2): 3.5}


def test_a_value_json_cannot_write_is_shown_with_str():
    # The function ran: its value must not come back as a failed call blaming json.dumps.
    (call,) = run_tool_calls([(FunctionTool(pairs), "{}")])
    assert call.ok and call.output == "{(1, 2): 3.5}"


def test_async_functions_are_awaited():
    assert FunctionTool(double).run("1.5") == "3.0"


@pytest.mark.parametrize(
    ("function", "text", "message"),
    [
        (add, "a=1, b=2", 'add: expected one JSON object of arguments like {"a": ..., "b": ...}; '
                       "invalid JSON: Expecting value (char 0)"),
        (add, '{"a": 1, "b": 2', 'add: expected one JSON object of arguments like {"a": ..., "b": ...}; '
                                 "invalid JSON: Expecting ',' delimiter (char 15)"),
        (add, "[1, 2]", 'add: expected one JSON object of arguments like {"a": ..., "b": ...}, got [1, 2]'),
        (add, '{"a": 1, "b": 2, "c": 3}', "add: unknown argument 'c'; its arguments are: a, b"),
        (add, '{"a": 1}', "add: missing required argument 'b'"),
        (add, "{}", "add: missing required arguments 'a', 'b'"),
        (add, '{"a": "one", "b": 2}', "add: argument 'a' must be an integer, got \"one\""),
        (add, '{"a": 1.5, "b": 2}', "add: argument 'a' must be an integer, got 1.5"),
        (add, '{"a": true, "b": 2}', "add: argument 'a' must be an integer, got true"),
        (square, '{"y": 3}', "square: unknown argument 'y'; its arguments are: x"),
        (square, "seven", "square: argument 'x' must be an integer, got \"seven\""),
        (kinds, '{"i": 1, "f": 1, "s": "", "b": "yes", "xs": [], "d": {}}',
         "kinds: argument 'b' must be true or false, got \"yes\""),
        (kinds, '{"i": 1, "f": 1, "s": "", "b": true, "xs": [1, "x\\ny"], "d": {}}',
         "kinds: argument 'xs' item 1 must be an integer, got \"x\\ny\""),
    ],
)
def test_bad_calls_raise_a_precise_one_line_tool_error(function, text, message):
    with pytest.raises(ToolError) as caught:
        FunctionTool(function).run(text)
    assert str(caught.value) == message
    assert "\n" not in str(caught.value)


def point(xy: tuple[int, int]) -> str:
    """Name a grid point.

    Args:
        xy: The column and the row.
    """
    return repr(xy)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"xy": [1, 2, 3]}', "point: argument 'xy' must be a JSON array of 2 items (integer, integer), got 3 items: "
                              "[1, 2, 3]"),
        ('{"xy": [1]}', "point: argument 'xy' must be a JSON array of 2 items (integer, integer), got 1 item: [1]"),
        ('{"xy": ["a", 2]}', "point: argument 'xy' item 0 must be an integer, got \"a\""),
        ('{"xy": "ab"}', "point: argument 'xy' must be a JSON array, got \"ab\""),
    ],
)
def test_a_tuple_argument_is_checked_item_by_item(text, message):
    with pytest.raises(ToolError) as caught:
        FunctionTool(point).run(text)
    assert str(caught.value) == message


def pair_tools(
    xy: tuple[int, int],
    named: list[tuple[str, float]],
    either: tuple[int, int] | list[int],
    maybe: tuple[int, str] | None = None,
) -> str:
    """Take pairs.

    Args:
        xy: The column and the row.
        named: Names with their weights.
        either: A pair or a list.
        maybe: An optional pair.
    """
    return "ok"


def test_a_tuple_argument_is_described_by_its_items():
    # get_json_schema writes a tuple as an array with one "prefixItems" entry per position: the prompt names them.
    text = FunctionTool(pair_tools).describe()
    assert "- xy (array [integer, integer]): The column and the row." in text
    assert "- named (array of array [string, number]): Names with their weights." in text
    assert "- either (array [integer, integer] or array of integer): A pair or a list." in text
    assert "- maybe (array [integer, string] or null, optional, default null): An optional pair." in text


def one_or_many(xs: int | list[int], key: tuple[int, int] | list[str] | None = None) -> str:
    """Echo a union's values with their Python types.

    Args:
        xs: One integer or a list of them.
        key: A pair of integers or a list of names.
    """
    return json.dumps([[value, type(value).__name__] for value in (xs, key)])


def count(items: int | list[int]) -> int:
    """Count integers.

    Args:
        items: One integer or a list of them.
    """
    return len(items) if isinstance(items, list) else 1


def nested(rows: list[int | list[int]]) -> str:
    """Take integers and lists of integers.

    Args:
        rows: Integers or lists of them.
    """
    return json.dumps(rows)


@pytest.mark.parametrize(
    ("function", "text", "message"),
    [
        # get_json_schema writes a union holding a list or a tuple as "anyOf": a value no member takes is refused.
        (one_or_many, '{"xs": "many"}', "one_or_many: argument 'xs' must be an integer or a JSON array of integer, "
                                        'got "many"'),
        (one_or_many, '{"xs": {"a": 1}}', "one_or_many: argument 'xs' must be an integer or a JSON array of integer, "
                                          'got {"a": 1}'),
        # the one member that takes an array says which item is wrong
        (one_or_many, '{"xs": [1, "x"]}', "one_or_many: argument 'xs' item 1 must be an integer, got \"x\""),
        (one_or_many, '{"xs": 1, "key": [true, 2]}', "one_or_many: argument 'key' must be a JSON array [integer, "
                                                     "integer] or a JSON array of string or null, got [true, 2]"),
        (one_or_many, '{"xs": 1, "key": 7}', "one_or_many: argument 'key' must be a JSON array [integer, integer] or "
                                             "a JSON array of string or null, got 7"),
        (nested, '{"rows": [1, [2, "x"]]}', "nested: argument 'rows' item 1 item 1 must be an integer, got \"x\""),
        (nested, '{"rows": [1, "y"]}', "nested: argument 'rows' item 1 must be an integer or a JSON array of integer, "
                                       'got "y"'),
        # a one-parameter function's union takes no object, so an object is the arguments, named wrong
        (count, '{"item": [1]}', "count: unknown argument 'item'; its arguments are: items"),
    ],
)
def test_a_union_argument_is_checked_against_its_members(function, text, message):
    with pytest.raises(ToolError) as caught:
        FunctionTool(function).run(text)
    assert str(caught.value) == message


def test_a_union_argument_keeps_a_value_a_member_takes_as_written_and_coerces_one_otherwise():
    tool = FunctionTool(one_or_many)
    assert json.loads(tool.run('{"xs": 3}')) == [[3, "int"], [None, "NoneType"]]
    assert json.loads(tool.run('{"xs": "3"}')) == [[3, "int"], [None, "NoneType"]]
    assert json.loads(tool.run('{"xs": [1, "2"], "key": null}')) == [[[1, 2], "list"], [None, "NoneType"]]
    # names that look like numbers are the list of strings as written, not a pair coerced to integers
    assert json.loads(tool.run('{"xs": 1, "key": ["1", "2"]}'))[1] == [["1", "2"], "list"]
    assert json.loads(tool.run('{"xs": 1, "key": [1, 2]}'))[1] == [[1, 2], "list"]
    assert json.loads(tool.run('{"xs": 1, "key": ["1", 2]}'))[1] == [[1, 2], "list"]
    assert FunctionTool(nested).run("[1, [2, 3.0], \"4\"]") == "[1, [2, 3], 4]"
    assert FunctionTool(count).run("[1, 2]") == "2"


def test_a_list_of_a_union_is_described_by_its_items():
    assert "- rows (array of (integer or array of integer)): Integers or lists of them." in FunctionTool(nested).describe()
    text = FunctionTool(one_or_many).describe()
    assert "- xs (integer or array of integer): One integer or a list of them." in text


def test_a_tuple_argument_of_the_right_shape_is_coerced_like_a_list():
    # Passed as the list JSON gives, as before: a successful call's output stays the same.
    assert FunctionTool(point).run('{"xy": [1, 2]}') == "[1, 2]"
    assert FunctionTool(point).run('{"xy": ["1", 2.0]}') == "[1, 2]"


def test_the_function_raising_is_a_failed_call_the_model_sees():
    with pytest.raises(ToolError, match=r"^divide raised ZeroDivisionError: float division by zero$"):
        FunctionTool(divide).run('{"a": 1, "b": 0}')
    (call,) = run_tool_calls([(FunctionTool(divide), '{"a": 1, "b": 0}')])
    assert not call.ok and call.output == "Error: divide raised ZeroDivisionError: float division by zero"


def test_reserved_and_clashing_tags_are_refused():
    with pytest.raises(ValueError, match=r"<answer> is reserved by the prompt format .*Rename the function"):
        FunctionTool(answer)
    with pytest.raises(ValueError, match="reserved"):
        tools_by_tag([answer])

    def python(code: str) -> str:
        """Pretend to run code.

        Args:
            code: the code
        """
        return code

    with pytest.raises(ValueError, match="share the tag 'python'"):
        tools_by_tag([PythonTool(), python])


def test_functions_trl_cannot_describe_are_refused():
    def untyped(x):
        """No type hint.

        Args:
            x: something
        """

    def undocumented(x: int) -> int:
        return x

    for function in (untyped, undocumented):
        with pytest.raises(TypeError, match="type hint on every argument and a Google-style docstring"):
            FunctionTool(function)


def test_plain_functions_are_wrapped_and_tools_kept():
    python = PythonTool()
    assert as_tool(python) is python
    registry = tools_by_tag([python, add])
    assert list(registry) == ["python", "add"] and registry["python"] is python
    assert isinstance(registry["add"], FunctionTool) and registry["add"].function is add


def test_description_names_the_call_format_arguments_and_docstring():
    text = FunctionTool(add).describe()
    assert text.splitlines()[0] == '<add>{"a": ..., "b": ...}</add>'
    for part in ("Add two integers.", "- a (integer): The first number.", "- b (integer): The second number.",
                 "Returns: The sum of a and b."):
        assert part in text
    text = FunctionTool(kinds).describe()
    assert "- xs (array of integer): integers" in text
    assert "- maybe (integer or null, optional, default null): an optional integer" in text


def test_system_prompt_includes_the_function_tools():
    section = function_tools_prompt([PythonTool(), add, square])
    assert section.index("<add>{") < section.index("<square>{")
    assert "Add two integers." in section and "Square an integer." in section and "<python>" not in section
    assert system_prompt_for([add, square]) == TOOLS_SYSTEM_PROMPT + "\n\n" + section
    assert system_prompt_for([PythonTool(), add, square]) == PYTHON_SYSTEM_PROMPT + "\n\n" + section
    assert system_prompt_for([PythonTool()]) == PYTHON_SYSTEM_PROMPT  # promises no search engine
    assert system_prompt_for([add], base="Be brief.") == "Be brief.\n\n" + function_tools_prompt([add])


def python(code: str) -> str:
    """A function that happens to be named like the built-in tool.

    Args:
        code: anything
    """
    return code


def test_a_function_named_like_a_builtin_tool_gets_no_builtin_prompt():
    # Wrapped or not, it is called with JSON: the Python tool's prompt ("code that prints the result") would
    # teach calls it cannot take.
    assert system_prompt_for([FunctionTool(python)]) == system_prompt_for([python])
    assert system_prompt_for([FunctionTool(python)]).startswith(TOOLS_SYSTEM_PROMPT)


class Calculator:
    tag = "calc"
    timeout = 2.0
    description = "An arithmetic expression."

    def run(self, text: str) -> str:
        return text


def test_a_tag_tool_of_your_own_is_taught_by_the_prompt(caplog):
    # It used to get the no-tools prompt: the policy was never told <calc> exists.
    prompt = system_prompt_for([Calculator()])
    assert prompt.startswith(TOOLS_SYSTEM_PROMPT) and "<calc>...</calc>\nAn arithmetic expression." in prompt
    both = system_prompt_for([PythonTool(), Calculator(), add])
    assert both.startswith(PYTHON_SYSTEM_PROMPT) and "<calc>...</calc>" in both and "<add>{" in both
    undescribed = Calculator()
    undescribed.description = None
    with caplog.at_level("WARNING"):
        assert "<calc>...</calc>" in system_prompt_for([undescribed])
    assert "has no `description`" in caplog.text
    data = Dataset.from_list([{"question": "What is 1 + 2?", "answer": "3"}])
    assert to_rapo_rows(data, tools=[Calculator()])[0]["prompt"][0]["content"] == prompt


def test_to_rapo_rows_puts_the_tools_in_the_system_prompt():
    data = Dataset.from_list([{"question": "What is 1 + 2?", "answer": "3"}])
    system = to_rapo_rows(data, tools=[add])[0]["prompt"][0]
    assert system == {"role": "system", "content": system_prompt_for([add])}
    own = to_rapo_rows(data, system_prompt="Be brief.", tools=[add])[0]["prompt"][0]["content"]
    assert own == "Be brief.\n\n" + function_tools_prompt([add])
    alone = to_rapo_rows(data, system_prompt=None, tools=[add])[0]["prompt"][0]["content"]
    assert alone == function_tools_prompt([add])
    python_only = to_rapo_rows(data, tools=[PythonTool()])[0]["prompt"][0]["content"]
    assert python_only == PYTHON_SYSTEM_PROMPT != SYSTEM_PROMPT


def test_engine_runs_a_function_call_and_forces_its_result(tiny_model):
    step = '<think>add them</think>\n<add>{"a": 1, "b": 2}</add>'
    bad = '<add>{"a": 1}</add>'
    engine, prompts, tok = make_engine(
        tiny_model,
        [[Turn(step + " never sampled"), Turn("<answer>\\boxed{3}</answer>")], [Turn(bad), Turn("done")]],
        tools=[EchoTool(), add],
    )
    assert "</add>" in engine.stop_strings and isinstance(engine.tools["add"], FunctionTool)
    good_row, bad_row = engine.run(prompts, hybrid=[False, False])

    step_ids = encode(tok, step)
    assert good_row.completion_ids[: len(step_ids)] == step_ids
    assert good_row.env_mask[: len(step_ids)] == [1] * len(step_ids)
    result = good_row.segments[1]
    expected = encode(tok, engine.config.result_template.format(output="3"))
    assert result.kind == "tool" and result.start == len(step_ids)
    assert good_row.completion_ids[result.start : result.end] == expected
    assert good_row.env_mask[result.start : result.end] == [0] * len(expected)
    assert (good_row.tool_calls, good_row.tool_failures) == (1, 0)

    error = engine.config.result_template.format(output="Error: add: missing required argument 'b'")
    result = bad_row.segments[1]
    assert bad_row.completion_ids[result.start : result.end] == encode(tok, error)
    assert (bad_row.tool_calls, bad_row.tool_failures) == (1, 1)


def test_engine_refuses_a_reserved_function_name(tiny_model):
    model, tok = tiny_model
    with pytest.raises(ValueError, match="reserved"):
        HybridRolloutEngine(tok, backend=None, tools=[answer])


def test_trainer_takes_plain_functions_as_tools(tiny_model_dir, tmp_path):
    from rapo_trl.config import RAPOConfig
    from rapo_trl.trainer import RAPOTrainer
    from tests.helpers.trainers import common_args, dataset, sevens

    args = RAPOConfig(**common_args(tmp_path), max_turn_tokens=32)
    trainer = RAPOTrainer(str(tiny_model_dir), sevens, args=args, train_dataset=dataset(), tools=[EchoTool(), add])
    assert [tool.tag for tool in trainer.rapo_tools] == ["python", "add"]
    assert trainer.rollout_engine.tools["add"].function is add
    assert "</add>" in trainer.rollout_engine.stop_strings


def test_trainer_refuses_a_reserved_function_name_before_loading_the_model(tmp_path):
    """A function called as a <tag> may not be named after the protocol's own tags (JSON tool calls have no tags)."""
    from rapo_trl.config import RAPOConfig
    from rapo_trl.trainer import RAPOTrainer

    args = RAPOConfig(output_dir=str(tmp_path / "out"), tool_protocol="tags", report_to="none")
    with pytest.raises(ValueError, match="reserved"):
        RAPOTrainer(str(tmp_path / "no-such-model"), args=args, tools=[answer])


def test_outcome_reward_scores_a_function_call_by_its_answer():
    """rapo_outcome_reward needs no configuration for function tools: a tag closed right before its
    <result> block is a tool call, held to the same rules as <python> and <search> (README, "Function tools")."""
    from rapo_trl.rewards import format_check, make_rapo_outcome_reward, rapo_outcome_reward, tools_used

    call = '<add>{"a": 1, "b": 2}</add>\n<result>\n3\n</result>\n'
    text = "<think>add</think>\n" + call + "<answer>\\boxed{3}</answer>"
    assert format_check(text) == (True, None)
    assert tools_used(text) == {"add"}
    assert rapo_outcome_reward(completions=[text], answer=["3"]) == [1.0]
    assert rapo_outcome_reward(completions=[text], answer=["3 apples"]) == [pytest.approx(2 / 3)]

    # A call without its result block fails the format check: the function is a tool here because it
    # was called with a result before, or because the reward was told its tag.
    unanswered = "<think>add</think>\n" + call + '<add>{"a": 2, "b": 2}</add>\n<answer>\\boxed{4}</answer>'
    assert format_check(unanswered) == (False, "tool call not completed: missing <result>")
    assert rapo_outcome_reward(completions=[unanswered], answer=["4"]) == [-1.0]
    alone = '<think>add</think>\n<add>{"a": 1, "b": 2}</add>\n<answer>\\boxed{3}</answer>'
    strict = make_rapo_outcome_reward(tool_tags=["add"])
    assert format_check(alone, tool_tags=["add"]) == (False, "tool call not completed: missing <result>")
    assert strict(completions=[alone], answer=["3"]) == [-1.0]
    # An unclosed call: its result has no call before it.
    unclosed = '<think>add</think>\n<add>{"a": 1, "b": 2}\n<result>\n3\n</result>\n<answer>\\boxed{3}</answer>'
    assert format_check(unclosed) == (False, "<result> at char 41 without a preceding tool call")
    assert rapo_outcome_reward(completions=[unclosed], answer=["3"]) == [-1.0]


@pytest.fixture
def runaway():
    """``twice(n)``: 2 * n, except that ``twice(-1)`` loops until the test ends (as a function that never
    returns would, forever); and the event that ends those loops."""
    release = threading.Event()

    def twice(n: int) -> int:
        """Double a number; -1 loops until released.

        Args:
            n: the number
        """
        while n == -1 and not release.is_set():
            pass
        return 2 * n

    yield twice, release
    release.set()


def _join_calls(tag: str) -> None:
    for thread in threading.enumerate():
        if thread.name == f"rapo-tool-{tag}":
            thread.join(10)


@pytest.mark.timeout(60)
def test_a_function_that_never_returns_holds_at_most_max_overdue_threads(runaway):
    twice, _ = runaway
    tool = FunctionTool(twice, timeout=0.2, max_overdue=2)

    def calls_running():  # this tool's call threads only: threads other tests left may end meanwhile
        return sum(thread.name == "rapo-tool-twice" for thread in threading.enumerate())

    before = calls_running()
    errors = []
    for _ in range(6):
        with pytest.raises(ToolError) as caught:
            tool.run("-1")
        errors.append(str(caught.value))
        assert calls_running() - before <= 2
    assert calls_running() - before == 2  # the two overdue calls, still looping
    assert errors[:2] == ["twice timed out after 0.2 s"] * 2
    assert errors[2:] == ["2 calls of twice still running after their 0.2 s timeout; "
                          "twice takes no new call until one of them ends"] * 4


@pytest.mark.timeout(60)
def test_calls_work_after_a_timeout_and_again_once_the_overdue_ones_end(runaway):
    twice, release = runaway
    tool = FunctionTool(twice, timeout=0.2, max_overdue=2)
    with pytest.raises(ToolError, match=r"^twice timed out after 0\.2 s$"):
        tool.run("-1")
    assert tool.run("3") == "6"  # one call overdue: the tool still takes calls
    (call,) = run_tool_calls([(tool, "-1")])
    assert call.output == "Error: twice timed out after 0.2 s"
    (call,) = run_tool_calls([(tool, "4")])
    assert call.output.startswith("Error: 2 calls of twice still running")
    release.set()
    _join_calls("twice")
    assert tool.run("4") == "8"


def test_a_function_calling_sys_exit_is_a_failed_call():
    def leave(code: int) -> int:
        """Exit.

        Args:
            code: the exit status
        """
        sys.exit(f"leaving with {code}")

    (call,) = run_tool_calls([(FunctionTool(leave), "3")])
    assert not call.ok and call.output == "Error: SystemExit: leaving with 3"


def test_timeout_and_max_overdue_are_checked():
    with pytest.raises(ValueError, match=r"^FunctionTool 'add': timeout must be > 0 and max_overdue >= 1"):
        FunctionTool(add, max_overdue=0)
    with pytest.raises(ValueError, match="timeout must be > 0"):
        FunctionTool(add, timeout=0)


_RUNAWAY_SCRIPT = textwrap.dedent(
    """
    from rapo_trl.tools import FunctionTool, run_tool_calls

    def spin(n: int) -> int:
        \"\"\"Loop forever.

        Args:
            n: ignored
        \"\"\"
        while True:
            pass

    print(run_tool_calls([(FunctionTool(spin, timeout=0.2), "1")])[0].output, flush=True)
    """
)


def test_a_process_with_a_call_that_never_returns_still_exits():
    """The runner's pool threads are joined at exit: a call stuck in one would keep a finished training
    run's process alive forever."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", _RUNAWAY_SCRIPT], capture_output=True, text=True, env=env,
                          timeout=60, check=True)
    assert done.stdout == "Error: spin timed out after 0.2 s\n"
