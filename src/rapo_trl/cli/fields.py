"""The recipe's fields (name, type, default, help) without importing TRL, transformers or torch.

A recipe fills three dataclasses: `RAPOScriptArguments`, `RAPOConfig` (TRL's GRPOConfig, itself
transformers' TrainingArguments) and TRL's `ModelConfig`. Importing the last two costs seconds (torch),
yet ``--help`` and a recipe's errors need only their fields; so those are read from the installed sources
with `ast`. The command itself still parses with the real classes (`TrlParser`). Should a source stop
looking like a plain dataclass, the real classes are imported instead: slower, never wrong.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import importlib.util
import typing
from pathlib import Path

from rapo_trl.cli.arguments import RAPOScriptArguments

# (package, file, class), each class deriving from the next one.
RAPO_CONFIG_SOURCES = (
    ("rapo_trl", "config.py", "RAPOConfig"),
    ("trl", "trainer/grpo_config.py", "GRPOConfig"),
    ("trl", "trainer/base_config.py", "_BaseConfig"),
    ("transformers", "training_args.py", "TrainingArguments"),
)
MODEL_CONFIG_SOURCES = (("trl", "trainer/model_config.py", "ModelConfig"),)

SCRIPT, TRAINING, MODEL = "RAPOScriptArguments", "RAPOConfig", "ModelConfig"
_TYPE_NAMES = {"int": int, "float": float, "str": str, "bool": bool, "list": list, "dict": dict, "Any": typing.Any,
               "Optional": typing.Optional, "Union": typing.Union, "Literal": typing.Literal}


RUNTIME_DEFAULT = argparse.SUPPRESS
"""The default of a field the class decides when it is imported (e.g. ``optim`` by torch version): not shown, and
left to TRL's parser."""


@dataclasses.dataclass(frozen=True)
class FieldSpec:
    name: str
    hint: typing.Any
    """The annotation; names defined elsewhere (enums such as IntervalStrategy, config classes) read as ``str``."""
    default: typing.Any
    metadata: dict
    """``help`` and argparse's extras (``choices``, ``nargs``, ``const``), as the dataclass declares them."""
    dataclass: str
    """The recipe dataclass it fills: RAPOScriptArguments, RAPOConfig or ModelConfig."""
    declared_in: str
    """The class of that dataclass's chain that declares it last (RAPOConfig, GRPOConfig, TrainingArguments, ...)."""


@functools.lru_cache(maxsize=1)
def recipe_fields() -> dict[str, FieldSpec]:
    """Every recipe field by name."""
    fields = _from_dataclass(RAPOScriptArguments, SCRIPT)
    try:
        fields |= _from_sources(RAPO_CONFIG_SOURCES, TRAINING) | _from_sources(MODEL_CONFIG_SOURCES, MODEL)
    except (OSError, SyntaxError, LookupError, ValueError, TypeError):
        from trl import ModelConfig

        from rapo_trl.config import RAPOConfig

        fields |= _from_dataclass(RAPOConfig, TRAINING) | _from_dataclass(ModelConfig, MODEL)
    return fields


def _from_dataclass(cls, dataclass: str) -> dict[str, FieldSpec]:
    hints = typing.get_type_hints(cls)
    declared = {name: klass.__name__ for klass in reversed(cls.__mro__) for name in vars(klass).get("__annotations__", {})}
    specs = {}
    for f in dataclasses.fields(cls):
        if f.init:
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            specs[f.name] = FieldSpec(f.name, hints[f.name], default, dict(f.metadata), dataclass, declared[f.name])
    return specs


def _from_sources(sources, dataclass: str) -> dict[str, FieldSpec]:
    """The fields of a dataclass chain, base class first so that subclasses override (as dataclasses do)."""
    nodes = [_class_node(*source) for source in sources]
    for node, base in zip(nodes, [*nodes[1:], None]):
        bases = [ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases]
        if bases != ([base.name] if base else []):
            raise LookupError(f"{node.name} derives from {bases}, not {base.name if base else 'nothing'}")
    specs: dict[str, FieldSpec] = {}
    for node in reversed(nodes):
        for spec in _class_fields(node, dataclass):
            # A redeclared field keeps its place; its type, default and help are the subclass's.
            specs[spec.name] = spec
    return specs


def _class_node(package: str, file: str, name: str) -> ast.ClassDef:
    spec = importlib.util.find_spec(package)  # a top-level package is located, not imported
    if spec is None or not spec.submodule_search_locations:
        raise LookupError(f"package {package} not found")
    path = Path(next(iter(spec.submodule_search_locations))) / file
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == name]
    if not found:
        raise LookupError(f"no class {name} in {path}")
    return found[0]


def _class_fields(node: ast.ClassDef, dataclass: str):
    # Class-level constants a default may name (TrainingArguments: `optim: str = field(default=default_optim)`).
    constants = {target.id: statement.value for statement in node.body if isinstance(statement, ast.Assign)
                 for target in statement.targets if isinstance(target, ast.Name)}
    # A constant reassigned under a condition (`default_optim` follows the installed torch) is only known at run
    # time: its fields' defaults are left unknown here rather than shown wrong.
    for statement in node.body:
        if not isinstance(statement, (ast.Assign, ast.AnnAssign, ast.FunctionDef, ast.Expr)):
            for inner in ast.walk(statement):
                if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Store):
                    constants[inner.id] = None
    for statement in node.body:
        if not isinstance(statement, ast.AnnAssign) or not isinstance(statement.target, ast.Name):
            continue
        value = statement.value
        is_field = isinstance(value, ast.Call) and ast.unparse(value.func).rsplit(".", 1)[-1] == "field"
        keywords = {k.arg: k.value for k in value.keywords} if is_field else {"default": value}
        if "init" in keywords and not ast.literal_eval(keywords["init"]):
            continue
        name = statement.target.id
        yield FieldSpec(name, _hint(statement.annotation), _default(keywords, constants), _metadata(keywords),
                        dataclass, node.name)


def _default(keywords: dict, constants: dict):
    if keywords.get("default_factory") is not None:
        factory = keywords["default_factory"]
        if isinstance(factory, ast.Lambda) and not factory.args.args:  # default_factory=lambda: ["tool_step"]
            return _literal(factory.body)
        return {"list": [], "dict": {}}.get(ast.unparse(factory))
    node = keywords.get("default")
    if node is None:
        return dataclasses.MISSING
    if isinstance(node, ast.Name) and node.id in constants and constants[node.id] is None:
        return RUNTIME_DEFAULT
    return _literal(constants.get(node.id, node) if isinstance(node, ast.Name) else node)


def _metadata(keywords: dict) -> dict:
    node = keywords.get("metadata")
    if not isinstance(node, ast.Dict):
        return {}
    # A value that is not a literal (TrainingArguments' `choices: trainer_log_levels.keys()`) is left out:
    # the real class checks it when the command runs.
    items = ((_literal(key), _literal(value)) for key, value in zip(node.keys, node.values) if key is not None)
    return {key: value for key, value in items if key is not None and value is not None}


def _literal(node):
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


def _hint(node: ast.expr):
    """A type hint from its source: `int | None`, `list[str]`, `Literal[...]`, `Optional[...]`, a quoted one."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return typing.Union[_hint(node.left), _hint(node.right)]  # noqa: UP007 - built from parts at run time
    if isinstance(node, ast.Constant):
        return type(None) if node.value is None else _hint(ast.parse(node.value, mode="eval").body)
    if isinstance(node, ast.Subscript):
        origin = _TYPE_NAMES.get(ast.unparse(node.value).rsplit(".", 1)[-1])
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if origin is typing.Literal:
            return typing.Literal[tuple(ast.literal_eval(item) for item in items)]
        if origin is None:
            return str
        args = tuple(_hint(item) for item in items)
        return origin[args if len(args) > 1 else args[0]]
    return _TYPE_NAMES.get(ast.unparse(node).rsplit(".", 1)[-1], str)
