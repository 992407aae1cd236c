"""The per-operation expert: one ``<python>`` call per operation, each later call using what an earlier
call printed.

With one call computing the whole expression, a stored trajectory has two steps (plan + call, answer), so the step a
hybrid rollout retrieves after its tool call is always the final answer: it leaves the policy nothing to write. Here
the program ``a = ...; b = ...; c = ...; print((a + b) * c)`` becomes

    call 1:  a = ...; b = ...; print(a + b)          -> prints 1246
    call 2:  step_1 = 1246; c = ...; print(step_1 * c)

in the evaluation order of the expression's tree (post-order, left operand first, as Python evaluates it), so a
trajectory has one step per operation plus the answer. The sandbox keeps no state between calls, so a later call
states what it needs: the story's quantities it uses, and each earlier result as the literal number that call
printed (read from its output, never recomputed), so a later call depends on the earlier call's actual result.
The answer is the expression's value either way, and a slip (:func:`~rapo_trl.tasks.python_expert.drawn_program`,
as in the one-call expert) is made to the whole program before it is split, so it propagates to the answer.
"""

from __future__ import annotations

import ast
import random
import re
from dataclasses import dataclass

from rapo_trl.tasks.python_expert import drawn_program
from rapo_trl.tasks.story_template import OPERATORS
from rapo_trl.tasks.trajectory import TrajectoryWriter, run_python_locally

TOOL_STEPS = ("one", "per_operation")
"""How the scripted expert uses ``<python>``: ``one`` call for the whole expression, or one call ``per_operation``."""
DEFAULT_TOOL_STEPS = "one"
_INTEGER = re.compile(r"-?\d+")

_PLANS = [
    "I will compute one operation per Python call, each call using the number the previous one printed.",
    "The story combines its quantities in several operations; I will run them one at a time in Python.",
    "Let me work through the calculation step by step, one operation per call, reusing each printed result.",
    "I need to find which quantities combine first; I will let Python do each operation in turn.",
]


@dataclass(frozen=True)
class Operation:
    """One binary operation of the program: ``name = left op right``; an operand is a story quantity's name, an
    earlier operation's ``name`` (``step_k``) or a literal."""

    name: str
    left: str
    operator: str
    right: str

    @property
    def text(self) -> str:
        return f"{self.left} {self.operator} {self.right}"


def check_tool_steps(tool_steps: str) -> str:
    if tool_steps not in TOOL_STEPS:
        raise ValueError(f"tool_steps must be one of {', '.join(TOOL_STEPS)}, got {tool_steps!r}")
    return tool_steps


def split_program(code: str) -> tuple[dict[str, str], list[Operation]]:
    """A program of ``name = value`` lines and one ``print(expression)``: its quantities (name -> literal) and its
    operations in evaluation order."""
    *assignments, last = code.strip().split("\n")
    quantities = dict(line.split(" = ", 1) for line in assignments)
    call = ast.parse(last, mode="eval").body
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "print"
            and len(call.args) == 1):
        raise ValueError(f"expected the program to end in print(expression), got {last!r}")
    operations: list[Operation] = []

    def operand(node: ast.AST) -> str:
        if isinstance(node, ast.Name) and node.id in quantities:
            return node.id
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return repr(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
            left, right = operand(node.left), operand(node.right)  # left first: Python's order
            operations.append(Operation(f"step_{len(operations) + 1}", left, OPERATORS[type(node.op)], right))
            return operations[-1].name
        raise ValueError(f"unsupported part {ast.dump(node)} in {last!r}")

    operand(call.args[0])
    if not operations:
        raise ValueError(f"the program computes nothing to split: {last!r}")
    return quantities, operations


def operation_program(operation: Operation, known: dict[str, str]) -> str:
    """The self-contained program of one call: each name the operation reads, as a literal, then its print."""
    names = dict.fromkeys(o for o in (operation.left, operation.right) if o in known)  # in use order, once
    return "".join(f"{name} = {known[name]}\n" for name in names) + f"print({operation.text})"


def per_operation_expert(question_row: dict, plans: list[str] | None = None, error_rate: float = 0.0,
                         rng: random.Random | None = None, tools=None) -> str:
    """A tagged trajectory with one ``<python>`` call per operation of the row's ``code`` (slipped with probability
    ``error_rate``, as the one-call expert draws it), a short thought after each result, the ``\\boxed{}`` answer.

    ``rng`` defaults to one seeded by the question id; ``tools`` may map ``"python"`` to the real ``PythonTool``.
    A call that prints no integer (a failing tool) ends the chain: the expert reports what it printed.
    """
    rng, code = drawn_program(question_row, error_rate, rng)  # the one-call expert's slip, drawn the same way
    known, operations = split_program(code)
    writer = TrajectoryWriter(tools, {"python": run_python_locally})
    writer.think(f"{rng.choice(plans or _PLANS)} First: {operations[0].text}.")
    for index, operation in enumerate(operations):
        output = writer.call("python", operation_program(operation, known))
        value = output.strip().splitlines()[-1] if output.strip() else ""
        if index + 1 == len(operations) or not _INTEGER.fullmatch(value):
            break
        known[operation.name] = value
        writer.think(f"{operation.name} = {value}. Next: {operations[index + 1].text}.")
    writer.think(f"The last call printed {value}, which answers the question.")
    writer.answer(f"\\boxed{{{value}}}")
    return writer.text()
