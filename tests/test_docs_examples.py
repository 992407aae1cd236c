"""Every code example a user copies from the README, docs/ and the notebook matches the current API, checked
statically (nothing trains, loads a model or downloads): the Python blocks' imports resolve, the functions,
classes and methods they call exist, and each call's arguments bind to its signature; every `rapo` command line
(fenced or inline) and YAML snippet passes the CLI's own check without a model; `make`, `pip install .[extra]` and
`bash scripts/...` lines name what exists. The examples that run (README's, docs/your-own-task.md's, the
notebook) are run by their own slower tests; this one keeps the others from drifting."""

from __future__ import annotations

import argparse
import ast
import builtins
import dataclasses
import importlib
import inspect
import json
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
SAVED_MODULE = re.compile(r"# (\w+)\.py\n")
"""A block that starts ``# my_tools.py`` is a file the page tells you to save, imported by its later blocks."""
ELIDED = ", *ELIDED"
"""What an example's ``, ...`` ("and the arguments you already have") becomes: a starred argument, so that its
call is checked for the keywords it names but not for the ones it leaves out."""


@dataclass
class Block:
    source: str  # "docs/store.md", "notebooks/quickstart.ipynb cell 4"
    fence_line: int  # the line of the opening ``` (0 for a notebook cell)
    language: str
    code: str

    def at(self, line: int = 0) -> str:
        """Where the block's ``line`` (1: its first) is, for a failure message."""
        if not self.fence_line:
            return f"{self.source}, line {line}" if line else self.source
        return f"{self.source}:{self.fence_line + line}"


def fenced_blocks(page: Path) -> list[Block]:
    text = page.read_text()
    return [Block(str(page.relative_to(ROOT)), line_of(text, found.start()), found.group(1), found.group(2))
            for found in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)]


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def notebook_blocks(notebook: Path) -> list[Block]:
    cells = json.loads(notebook.read_text())["cells"]
    return [Block(f"{notebook.relative_to(ROOT)} cell {index}", 0, "python", "".join(cell["source"]))
            for index, cell in enumerate(cells) if cell["cell_type"] == "code"]


def python_sources() -> dict[str, list[Block]]:
    """Each page's (or notebook's) Python blocks, in order: a page's blocks share one namespace, as a reader
    running them one after another."""
    pages = {page.name: [b for b in fenced_blocks(page) if b.language == "python"] for page in PAGES}
    pages.update({notebook.name: notebook_blocks(notebook) for notebook in NOTEBOOKS})
    return {name: blocks for name, blocks in pages.items() if blocks}


# --- Python: imports, callees and the arguments they are given ------------------------------------------------

@dataclass(frozen=True)
class Instance:
    """What a name holds when the example made it by calling a class (or a function returning one)."""

    cls: type


UNKNOWN = object()  # a value the check cannot follow (a dataset, a tuple unpacked, a user's own module)


class CallChecker:
    """Follows a page's blocks statement by statement: what each name holds, where that can be told without
    running anything, and whether each call binds to its callee's signature."""

    def __init__(self, saved_modules: set[str] = frozenset(), placeholders: bool = False):
        self.saved_modules = saved_modules
        self.placeholders = placeholders  # an inline fragment's `corpus`, `path`: names the reader fills in
        self.names: dict[str, object] = {}
        self.bound_somewhere: set[str] = set()
        self.problems: list[str] = []
        self.calls_checked = 0
        self.block: Block | None = None

    def check_block(self, block: Block) -> None:
        self.block = block
        tree = ast.parse(re.sub(r",\s*\.\.\.(?=\s*\))", ELIDED, block.code), block.at())
        self.bound_somewhere |= names_bound_in(tree)
        for statement in tree.body:
            self.check_statement(statement)

    def check_statement(self, statement: ast.stmt) -> None:
        if isinstance(statement, ast.Import | ast.ImportFrom):
            self.import_names(statement)
            return
        for node in ast.walk(statement):
            if isinstance(node, ast.Call):
                self.check_call(node)
        for node in attribute_reads(statement):
            self.attribute_value(node)
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target = statement.targets[0]
            if isinstance(target, ast.Name):
                self.names[target.id] = self.value_of(statement.value)

    def problem(self, node: ast.AST, message: str) -> None:
        self.problems.append(f"{self.block.at(node.lineno)}: {message}")

    def import_names(self, statement: ast.Import | ast.ImportFrom) -> None:
        if isinstance(statement, ast.Import):
            for alias in statement.names:
                module = self.module(statement, alias.name)
                top = alias.name.split(".")[0]
                self.names[alias.asname or top] = UNKNOWN if module is UNKNOWN else importlib.import_module(top)
            return
        module = self.module(statement, statement.module)
        for alias in statement.names:
            value = UNKNOWN
            if module is not UNKNOWN:
                value = getattr(module, alias.name, UNKNOWN)
                if value is UNKNOWN:
                    self.problem(statement, f"`from {statement.module} import {alias.name}`: no such name")
            self.names[alias.asname or alias.name] = value

    def module(self, statement: ast.AST, name: str):
        if name.split(".")[0] in self.saved_modules:
            return UNKNOWN
        try:
            return importlib.import_module(name)
        except ImportError as error:
            self.problem(statement, f"`import {name}` fails: {error}")
            return UNKNOWN

    def value_of(self, node: ast.expr):
        """The object, or the `Instance`, an expression names; UNKNOWN where that needs running the example."""
        if isinstance(node, ast.Name):
            return self.name_value(node)
        if isinstance(node, ast.Attribute):
            return self.attribute_value(node)
        if isinstance(node, ast.Call):
            return returned(self.value_of(node.func))
        return UNKNOWN

    def name_value(self, node: ast.Name):
        if node.id in self.names:
            return self.names[node.id]
        if node.id in self.bound_somewhere:
            return UNKNOWN  # a parameter, a loop variable, a name unpacked from a tuple
        if hasattr(builtins, node.id):
            return getattr(builtins, node.id)
        import rapo_trl  # a fragment (docs/rewards.md) names the top-level API without importing it

        if node.id in rapo_trl.__all__:
            return getattr(rapo_trl, node.id)
        if self.placeholders:
            return UNKNOWN
        self.problem(node, f"`{node.id}` is never defined or imported")
        return UNKNOWN

    def attribute_value(self, node: ast.Attribute):
        owner = self.value_of(node.value)
        if owner is UNKNOWN:
            return UNKNOWN
        if isinstance(owner, Instance):
            found = getattr(owner.cls, node.attr, UNKNOWN)
            if found is UNKNOWN and dataclasses.is_dataclass(owner.cls) and node.attr not in declared_attributes(owner.cls):
                self.problem(node, f"`{ast.unparse(node)}`: {owner.cls.__name__} has no field {node.attr!r}")
            # Other classes set their instance attributes in __init__: only a class attribute can be followed.
            return found
        if not hasattr(owner, node.attr):
            self.problem(node, f"`{ast.unparse(node)}`: {describe(owner)} has no attribute {node.attr!r}")
            return UNKNOWN
        return getattr(owner, node.attr)

    def check_call(self, call: ast.Call) -> None:
        callee, takes_self = self.callee(call.func)
        if callee is UNKNOWN:
            return
        try:
            signature = inspect.signature(callee)
        except (TypeError, ValueError):  # a builtin without a signature (print, zip)
            return
        self.calls_checked += 1
        positional = [None] * takes_self + [None for arg in call.args if not isinstance(arg, ast.Starred)]
        keywords = {keyword.arg: None for keyword in call.keywords if keyword.arg}
        partial = (self.placeholders or any(isinstance(arg, ast.Starred) for arg in call.args)
                   or len(keywords) < len(call.keywords))  # a fragment names the arguments it is about
        try:
            bound = (signature.bind_partial if partial else signature.bind)(*positional, **keywords)
        except TypeError as error:
            self.problem(call, f"`{ast.unparse(call.func)}(...)`: {error}{did_you_mean(error, signature)}")
            return
        self.check_forwarded(call, callee, bound)

    def check_forwarded(self, call: ast.Call, callee, bound: inspect.BoundArguments) -> None:
        """Keywords a ``**kwargs`` catches, checked against the function it hands them to
        (``TraceStore.add_from_dataset`` forwards its ``source=`` and ``tool_tags=``)."""
        caught = {name: value for parameter, value in bound.arguments.items()
                  if bound.signature.parameters[parameter].kind is inspect.Parameter.VAR_KEYWORD
                  for name in value}
        target = forwarded_to(callee) if caught else None
        if target is None:
            return
        try:
            inspect.signature(target).bind_partial(**caught)
        except TypeError as error:
            self.problem(call, f"`{ast.unparse(call.func)}(...)` hands its **kwargs to {target.__qualname__}: {error}")

    def callee(self, func: ast.expr) -> tuple[object, bool]:
        """The callable a call's ``func`` names, and whether binding it needs a ``self`` (a method called on an
        instance, looked up on its class)."""
        if isinstance(func, ast.Attribute):
            owner = self.value_of(func.value)
            if isinstance(owner, Instance):
                method = inspect.getattr_static(owner.cls, func.attr, UNKNOWN)
                if method is UNKNOWN and func.attr in declared_attributes(owner.cls):
                    return UNKNOWN, False  # a callable held in a field (Task.expert): its type says no more
                if method is UNKNOWN:
                    self.problem(func, f"`{ast.unparse(func)}(...)`: {owner.cls.__name__} has no method {func.attr!r}")
                    return UNKNOWN, False
                return getattr(owner.cls, func.attr), not isinstance(method, staticmethod | classmethod)
        value = self.value_of(func)
        return (value if callable(value) else UNKNOWN), False


def attribute_reads(statement: ast.stmt) -> list[ast.Attribute]:
    """The whole ``a.b.c`` reads of a statement (``args.output_dir`` passed along); a call's own callee is checked
    with the call."""
    inner = {id(node.value) for node in ast.walk(statement) if isinstance(node, ast.Attribute)}
    callees = {id(node.func) for node in ast.walk(statement) if isinstance(node, ast.Call)}
    return [node for node in ast.walk(statement) if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)
            and id(node) not in inner | callees]


def names_bound_in(tree: ast.AST) -> set[str]:
    """Every name a block binds anywhere: assignments, loops, parameters, definitions, imports."""
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
    return bound


def did_you_mean(error: TypeError, signature: inspect.Signature) -> str:
    import difflib

    wrong = re.search(r"keyword argument '(\w+)'", str(error))
    close = difflib.get_close_matches(wrong.group(1), signature.parameters, n=1) if wrong else []
    return f" (did you mean {close[0]!r}?)" if close else ""


def forwarded_to(callee):
    """The function ``callee`` passes its ``**kwargs`` on to, where its source names it plainly; else None."""
    function = inspect.unwrap(getattr(callee, "__func__", callee))
    try:
        tree = ast.parse(inspect.cleandoc("\n" + inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return None
    varkw = inspect.getfullargspec(function).varkw
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and any(k.arg is None and ast.unparse(k.value) == varkw for k in node.keywords)):
            target = local_imports(tree).get(node.func.id) or getattr(function, "__globals__", {}).get(node.func.id)
            return target if callable(target) else None
    return None


def local_imports(tree: ast.AST) -> dict[str, object]:
    """The names a function imports in its body (the package defers its heavy imports that way)."""
    return {alias.asname or alias.name: getattr(importlib.import_module(node.module), alias.name, None)
            for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module and not node.level
            for alias in node.names}


def declared_attributes(cls: type) -> set[str]:
    """The attributes a class declares with a type (dataclass fields, annotated attributes), across its bases."""
    return {name for base in cls.__mro__ for name in getattr(base, "__annotations__", {})}


def returned(callee):
    """What calling ``callee`` gives, as far as its type says: a class makes an instance; a function annotated to
    return a class (``-> TraceStore``, ``-> Self``) does too."""
    if isinstance(callee, type):
        return Instance(callee)
    annotation = getattr(inspect.unwrap(callee), "__annotations__", {}).get("return") if callable(callee) else None
    owner = getattr(callee, "__self__", None)
    if isinstance(owner, type) and annotation in (owner.__name__, "Self", owner):
        return Instance(owner)  # a classmethod constructor: TraceStore.connect, RolloutAgent.from_pretrained
    if isinstance(annotation, type):
        return Instance(annotation)
    if isinstance(annotation, str):
        module = inspect.getmodule(callee)
        found = getattr(module, annotation, None)
        if isinstance(found, type):
            return Instance(found)
    return UNKNOWN


def describe(value) -> str:
    return f"module {value.__name__}" if inspect.ismodule(value) else getattr(value, "__name__", repr(value))


def check_python(blocks: list[Block]) -> CallChecker:
    saved = {found.group(1) for block in blocks if (found := SAVED_MODULE.match(block.code))}
    checker = CallChecker(saved)
    for block in blocks:
        checker.check_block(block)
    return checker


@pytest.mark.parametrize("page", sorted(python_sources()))
def test_python_examples_call_the_api_as_it_is(page):
    checker = check_python(python_sources()[page])
    assert not checker.problems, "\n".join(checker.problems)
    assert checker.calls_checked, f"{page}: no call was checked; did the parsing miss the blocks?"


# Inline fragments such as `to_rapo_rows(ds, question_column="problem", tools=...)`: the names they call, from
# where the docs import them, and the name that stands for a store.
FRAGMENT_NAMES = {"store": "rapo_trl.TraceStore", "EnvironmentAgent": "rapo_trl.rollout.EnvironmentAgent",
                  "TransformersBackend": "rapo_trl.rollout.TransformersBackend"}


def inline_calls(page: Path) -> list[Block]:
    """The page's inline code spans that call something of the package with keywords, as parseable Python: ``...``
    and ``<the prompt>`` placeholders become values, and a leading ``...`` elided arguments."""
    import rapo_trl

    text, found = page.read_text(), []
    for span in re.finditer(r"(?<!`)`((\w+)[\w.]*\([^`\n]*=[^`\n]*\)[\w.()]*)`(?!`)", text):
        if span.group(2) not in FRAGMENT_NAMES and span.group(2) not in rapo_trl.__all__:
            continue  # another library's call (load_dataset) or a formula
        code = re.sub(r"<[^>]*>", "...", span.group(1))
        code = re.sub(r"\(\.\.\.,", "(*ELIDED,", re.sub(r",\s*\.\.\.(?=\s*[,)])", ELIDED, code))
        found.append(Block(str(page.relative_to(ROOT)), line_of(text, span.start()) - 1, "python", code))
    return found


def fragment_names() -> dict[str, object]:
    names = {}
    for name, dotted in FRAGMENT_NAMES.items():
        module, _, attribute = dotted.rpartition(".")
        value = getattr(importlib.import_module(module), attribute)
        names[name] = Instance(value) if name == "store" else value
    return names


def test_inline_calls_name_keywords_the_api_takes():
    checker = CallChecker(placeholders=True)
    fragments = [block for page in PAGES for block in inline_calls(page)]
    for block in fragments:
        checker.names = fragment_names()
        checker.check_block(block)
    assert not checker.problems, "\n".join(checker.problems)
    assert checker.calls_checked >= 20, [block.code for block in fragments]


# --- Shell and YAML: `rapo` command lines, YAML recipes, make targets, extras, scripts ----------------------

SHELL = ("bash", "shell", "sh", "console")
SAMPLE_ROW = {"question": "A crate holds 48 jars. How many jars are in 37 crates?", "answer": "1776"}


def shell_lines(block: Block) -> list[list[str]]:
    """The block's commands as words, continuation lines joined and comments dropped."""
    joined = block.code.replace("\\\n", " ")
    return [words for line in joined.splitlines() if (words := shlex.split(line, comments=True))]


def rapo_argv(words: list[str]) -> list[str] | None:
    """The ``rapo`` arguments of a command line: after ``rapo``, or after ``-m rapo_trl.cli`` (under accelerate)."""
    if words[:1] == ["rapo"]:
        return words[1:]
    for index in range(len(words) - 1):
        if words[index:index + 2] == ["-m", "rapo_trl.cli"]:
            return words[index + 2:]
    return None


def rapo_commands() -> set[str]:
    from rapo_trl.cli import build_parser

    (subcommands,) = [action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction)]
    return set(subcommands.choices)


def inline_rapo_commands(page: Path) -> list[tuple[str, list[str]]]:
    """``(where, argv)`` of each inline `rapo COMMAND ...` span that gives a flag, a path or a PLACEHOLDER (a bare
    `rapo train` or `rapo store stats` names the command; `rapo eval: error: ...` quotes a message)."""
    text, commands = page.read_text(), rapo_commands()
    found = []
    for span in re.finditer(r"(?<!`)`(rapo [^`\n]+)`(?!`)", text):
        words = shlex.split(span.group(1))
        given = [word for word in words[2:] if word.startswith("--") or "/" in word or word.isupper()]
        if words[1] in commands and given:
            found.append((f"{page.relative_to(ROOT)}:{line_of(text, span.start())}", words[1:]))
    return found


def documented_commands() -> list[tuple[str, list[str]]]:
    fenced = [(block.at(), argv) for page in PAGES for block in fenced_blocks(page) if block.language in SHELL
              for words in shell_lines(block) if (argv := rapo_argv(words)) is not None]
    return fenced + [found for page in PAGES for found in inline_rapo_commands(page)]


def cli_refusal(argv: list[str]) -> str | None:
    """Why the CLI refuses ``argv`` without loading a model (its quick check), or None when it accepts it."""
    import contextlib
    import io

    from rapo_trl.cli import build_parser
    from rapo_trl.cli.recipe import HELP_FLAGS, RECIPE_COMMANDS, read_recipe

    argv = [arg for arg in argv if arg not in HELP_FLAGS]  # a help request prints and exits: the flag exists
    stderr = io.StringIO()
    with mock.patch.dict(os.environ), contextlib.redirect_stderr(stderr):  # a recipe's env: stays in this check
        try:
            if argv[0] in RECIPE_COMMANDS:
                read_recipe(argv[0], argv[1:])
            else:
                build_parser().parse_args(argv)
        except SystemExit:
            return stderr.getvalue().strip() or "exited"
        except Exception as error:  # noqa: BLE001 - the CLI's one-line refusal is the finding
            return f"{type(error).__name__}: {error}"
    return None


@pytest.fixture
def reader_folder(tmp_path, monkeypatch):
    """A working directory as a reader's: the repository's configs, the files the guide tells you to save, and a
    JSONL file wherever a command reads one."""
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    for blocks in python_sources().values():
        for block in blocks:
            if found := SAVED_MODULE.match(block.code):
                (tmp_path / f"{found.group(1)}.py").write_text(block.code)
    for _, argv in documented_commands():
        for flag, value in zip(argv, argv[1:]):
            if flag in ("--dataset_path", "--eval_dataset_path") and value.endswith(".jsonl"):
                (tmp_path / value).write_text(json.dumps(SAMPLE_ROW) + "\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_rapo_command_lines_pass_the_clis_check(reader_folder):
    commands = documented_commands()
    assert len({argv[0] for _, argv in commands}) >= 5, commands  # build-store, train, eval, store, plot, push
    refused = [f"{where}: rapo {shlex.join(argv)}\n    {why}" for where, argv in commands if (why := cli_refusal(argv))]
    assert not refused, "\n".join(refused)


def test_yaml_snippets_are_recipes_the_cli_accepts(tmp_path):
    snippets = [block for page in PAGES for block in fenced_blocks(page) if block.language in ("yaml", "yml")]
    assert snippets
    for index, block in enumerate(snippets):
        recipe = tmp_path / f"snippet{index}.yaml"
        recipe.write_text(block.code)
        why = cli_refusal(["train", "--config", str(recipe)])
        assert why is None, f"{block.at()}: {why}"


def test_shell_lines_name_make_targets_extras_and_scripts_that_exist():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    makefile = (ROOT / "Makefile").read_text()
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    blocks = [block for page in PAGES for block in fenced_blocks(page) if block.language in SHELL]
    for block in blocks:
        for named in re.findall(r"\.\[([\w,-]+)\]", block.code):  # in comments too: `".[tensorboard]" likewise`
            assert set(named.split(",")) <= extras, f"{block.at()}: pip install .[{named}]: no such extra"
        for words in shell_lines(block):
            if words[0] == "make":
                assert re.search(rf"^{re.escape(words[1])}:", makefile, re.M), f"{block.at()}: no `make {words[1]}`"
            if words[:1] == ["bash"] or words[1:2] == ["bash"]:
                script = next(word for word in words if word.endswith(".sh"))
                assert (ROOT / script).is_file(), f"{block.at()}: {script} is not in the repository"
