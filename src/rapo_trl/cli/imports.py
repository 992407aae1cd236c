"""Objects named on the command line by import path (``pkg.module.name``), as ``trl grpo --reward_funcs`` takes them."""

from __future__ import annotations

import ast
import importlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from rapo_trl.cli.errors import UsageError


def is_import_path(name: str) -> bool:
    """``pkg.module.name`` (or ``pkg.module:name``): a dotted name, not a file path."""
    return ("." in name or ":" in name) and "/" not in name and not name.endswith((".py", ".json", ".jsonl"))


def import_object(path: str, what: str):
    """The object at ``path``; the working directory is importable, as in ``trl grpo``. ``what`` names it in errors."""
    module_name, _, attribute = path.replace(":", ".").rpartition(".")
    if not module_name:
        raise UsageError(f"{what} '{path}' is not an import path (pkg.module.name)")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise UsageError(f"{what} '{path}': cannot import {module_name} ({error})") from None
    if not hasattr(module, attribute):
        raise UsageError(f"{what} '{path}': {module_name} has no {attribute}")
    return getattr(module, attribute)


# The arguments TRL passes every reward function itself (`GRPOTrainer._calculate_rewards`); any other argument a
# reward function requires must be a column of the training rows.
TRL_REWARD_ARGUMENTS = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric")


@dataclass(frozen=True)
class Located:
    """What an import path names, read from its module's source without running it (imports cost seconds)."""

    module_file: str | None
    """The module's source file; None when it has none to read (an extension module, a namespace package)."""
    bound: bool | None
    """Whether the module binds the name: None when its source cannot tell (``import *``, ``__getattr__``)."""
    parameters: tuple[str, ...] | None = None
    """The required parameters of the function it names, when its ``def`` was found."""


def _module_spec(module_name: str):
    """The spec of ``module_name``, found without importing it or its parent packages (imports run code that may
    load torch); the working directory first, as `import_object` imports."""
    from importlib.machinery import PathFinder

    search = [os.getcwd(), *sys.path]
    spec = None
    parts = module_name.split(".")
    for depth in range(1, len(parts) + 1):
        spec = PathFinder.find_spec(".".join(parts[:depth]), search)
        if spec is None:
            return None
        search = list(spec.submodule_search_locations or [])
        if depth < len(parts) and not search:
            return None  # a plain module has no submodules
    return spec


def _required(function: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str, ...]:
    arguments = function.args
    positional = [*arguments.posonlyargs, *arguments.args]
    without_default = positional[: len(positional) - len(arguments.defaults)]
    keyword = [arg for arg, default in zip(arguments.kwonlyargs, arguments.kw_defaults) if default is None]
    return tuple(arg.arg for arg in [*without_default, *keyword])


def _top_level(tree: ast.Module):
    """Module-level statements, including those under ``if``/``try``/``with`` (``if TYPE_CHECKING:`` imports)."""
    pending = list(tree.body)
    while pending:
        statement = pending.pop(0)
        yield statement
        if isinstance(statement, (ast.If, ast.Try, ast.With)):
            for block in ("body", "orelse", "finalbody"):
                pending.extend(getattr(statement, block, []))
            for handler in getattr(statement, "handlers", []):
                pending.extend(handler.body)


def locate(path: str, _depth: int = 0) -> Located:
    """Where ``path`` (``pkg.module.name``) points, read from source; refuse, as a `UsageError`, a module that is
    nowhere to be found and a name its module certainly does not define. Nothing is imported."""
    module_name, _, attribute = path.replace(":", ".").rpartition(".")
    if not module_name:
        raise UsageError(f"'{path}' is not an import path (pkg.module.name)")
    spec = _module_spec(module_name)
    if spec is None:
        raise UsageError(f"'{path}': no module {module_name} in the working directory or the installed packages")
    origin = spec.origin if spec.origin and spec.origin.endswith(".py") else None
    if origin is None:
        return Located(None, None)
    try:
        tree = ast.parse(Path(origin).read_text(encoding="utf-8"), origin)
    except (OSError, SyntaxError, ValueError):
        return Located(origin, None)  # importing it reports a syntax error with its traceback
    names, unsure = set(), False
    for statement in _top_level(tree):
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)) and statement.name == attribute:
            return Located(origin, True, _required(statement))
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(statement.name)
            unsure |= statement.name == "__getattr__"
        elif isinstance(statement, (ast.Import, ast.ImportFrom)):
            for alias in statement.names:
                unsure |= alias.name == "*"
                names.add(alias.asname or alias.name.split(".")[0])
                if (alias.asname or alias.name) == attribute and isinstance(statement, ast.ImportFrom) and _depth < 3:
                    # a re-export (`from .accuracy_rewards import accuracy_reward`): its def is in that module
                    source = _absolute(statement, module_name, spec)
                    if source:
                        try:
                            return locate(f"{source}.{alias.name}", _depth + 1)
                        except UsageError:
                            return Located(origin, True)
        elif isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            names |= {node.id for node in ast.walk(statement)
                      if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
    if attribute in names:
        return Located(origin, True)
    if unsure or spec.submodule_search_locations:  # a package's submodule is an attribute once imported
        return Located(origin, None)
    return Located(origin, False)


def _absolute(statement: ast.ImportFrom, module_name: str, spec) -> str | None:
    """The module a ``from ... import`` names, made absolute."""
    if not statement.level:
        return statement.module
    package = module_name if spec.submodule_search_locations else module_name.rpartition(".")[0]
    for _ in range(statement.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{statement.module}" if statement.module else package


def check_import_path(path: str, what: str) -> Located:
    """`locate` with ``what`` (reward, tool) in the message; a name the module lacks is refused with a suggestion."""
    try:
        found = locate(path)
    except UsageError as error:
        raise UsageError(f"{what} {error}") from None
    if found.bound is False:
        module_name, _, attribute = path.replace(":", ".").rpartition(".")
        raise UsageError(f"{what} '{path}': {module_name} has no {attribute} ({found.module_file})")
    return found
