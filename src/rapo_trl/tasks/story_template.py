"""One word-problem story: a wording over named quantities and the program that answers it.

A story's *shape* is its expression tree up to variable names and the order of the operands of ``+``
and ``*`` (:func:`shape_of`); several stories share a shape when they ask for the same program in
different words, domains and quantity orders.
"""

from __future__ import annotations

import ast
import functools
import random
from dataclasses import dataclass

OPERATORS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//"}
COMMUTATIVE = (ast.Add, ast.Mult)

N3, N4, N5, N6 = (100, 999), (1000, 9999), (10_000, 99_999), (100_000, 999_999)

NAMES = [
    "Amara", "Bastian", "Calla", "Dmitri", "Esme", "Farid", "Greta", "Hiro",
    "Ines", "Jonah", "Keziah", "Lior", "Mateus", "Nadia", "Osei", "Priya",
]


@dataclass(frozen=True)
class StoryTemplate:
    id: str  # stable: never renumber, question ids and the split depend on it
    story: str  # format string over the variable names and optionally {name}
    variables: dict[str, tuple[int, int]]  # name -> inclusive value range, sampled in this order
    expression: str  # Python over the variable names; + - * // and parentheses only
    # (variable, remainder expression): after sampling, ``variable -= remainder`` so a division the
    # story calls exact ("shared equally") leaves nothing over.
    exact: tuple[tuple[str, str], ...] = ()
    shape_of_template: str | None = None  # the template id whose program this story retells (None: its own)

    @functools.cached_property
    def _operators(self) -> list[str]:
        tree = ast.parse(self.expression, mode="eval")
        return [OPERATORS[type(node.op)] for node in ast.walk(tree) if isinstance(node, ast.BinOp)]

    @property
    def ops(self) -> int:
        """Number of arithmetic operations in the expression."""
        return len(self._operators)

    @property
    def operators(self) -> frozenset[str]:
        """The distinct operators the expression uses."""
        return frozenset(self._operators)

    @property
    def shape(self) -> str:
        """The expression tree with variables anonymised (see :func:`shape_of`)."""
        return shape_of(self.expression)

    def sample(self, rng: random.Random, digits: int = 0) -> tuple[str, str]:
        values = {v: rng.randint(*widen(lo, hi, digits)) for v, (lo, hi) in self.variables.items()}
        for variable, remainder in self.exact:
            values[variable] -= eval(remainder, {}, dict(values))  # noqa: S307 - our own expressions
        question = self.story.format(name=rng.choice(NAMES), **values)
        code = "".join(f"{v} = {x}\n" for v, x in values.items()) + f"print({self.expression})"
        return question, code


def shape_of(expression: str) -> str:
    """A canonical form of ``expression``: variables become ``x``, operands of ``+``/``*`` are sorted, and
    chains of one commutative operator are flattened (``a + b + c`` equals ``c + (a + b)``)."""

    def canon(node: ast.AST) -> str:
        if isinstance(node, ast.Name | ast.Constant):
            return "x"
        if not isinstance(node, ast.BinOp) or type(node.op) not in OPERATORS:
            raise ValueError(f"unsupported expression part {ast.dump(node)} in {expression!r}")
        symbol = OPERATORS[type(node.op)]
        if isinstance(node.op, COMMUTATIVE):
            operands = []

            def flatten(part: ast.AST) -> None:
                if isinstance(part, ast.BinOp) and type(part.op) is type(node.op):
                    flatten(part.left)
                    flatten(part.right)
                else:
                    operands.append(canon(part))

            flatten(node)
            return "(" + f" {symbol} ".join(sorted(operands)) + ")"
        return f"({canon(node.left)} {symbol} {canon(node.right)})"

    return canon(ast.parse(expression, mode="eval").body)


def widen(lo: int, hi: int, digits: int) -> tuple[int, int]:
    """The range scaled by ``10**digits`` when it is a large quantity (3+ digits at its low end)."""
    if lo < 100:
        return lo, hi
    return lo * 10**digits, (hi + 1) * 10**digits - 1
