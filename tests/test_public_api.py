"""The top-level API: what the README and the notebook use is exported from `rapo_trl`, lazily (importing
the package loads none of torch, transformers or TRL), listed by dir(), and typed (py.typed)."""

from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess
import sys
import textwrap
from importlib import resources
from pathlib import Path

import pytest

import rapo_trl

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
NOTEBOOK = ROOT / "notebooks" / "quickstart.ipynb"
INIT = ROOT / "src" / "rapo_trl" / "__init__.py"
HEAVY = ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "chromadb", "sentence_transformers")


def rapo_trl_imports(source: str) -> list[tuple[str, str]]:
    """(module, name) of every `from rapo_trl[.x] import name` in Python source; `import rapo_trl.x` as
    (module, "")."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # a doc snippet with `...` arguments: its import statements alone
        statements = re.findall(r"^(?:from\s+rapo_trl[\w.]*\s+import\s+(?:\([^)]*\)|.*)|import\s+rapo_trl.*)$",
                                source, flags=re.M)
        tree = ast.parse("\n".join(statements))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "rapo_trl":
            found += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, "") for alias in node.names if alias.name.startswith("rapo_trl.")]
    return found


def python_blocks(path: Path) -> str:
    return "\n".join(re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S))


def docs() -> list[Path]:
    return sorted((ROOT / "docs").glob("*.md"))


def notebook_code() -> str:
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    return "\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "code")


def _fresh_interpreter(code: str) -> dict:
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_import_loads_no_heavy_dependency_and_dir_lists_the_lazy_names():
    # A fresh interpreter: in this one, other tests have long since imported torch and resolved the names.
    seen = _fresh_interpreter(f"""
        import json, sys
        import rapo_trl
        names = dir(rapo_trl)
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})
        print(json.dumps({{"heavy": heavy, "dir": names, "all": rapo_trl.__all__}}))
    """)
    assert seen["heavy"] == []
    assert "RAPOTrainer" in seen["all"] and "RAPOTrainer" in seen["dir"]
    assert set(seen["all"]) <= set(seen["dir"])


def test_every_exported_name_resolves_to_the_object_of_that_name():
    for name in rapo_trl.__all__:
        value = getattr(rapo_trl, name)
        if name == "__version__":
            continue
        assert value is getattr(importlib.import_module(rapo_trl._LAZY[name]), name), name
        assert getattr(value, "__name__", name) == name, (name, value)
    namespace = {}
    exec("from rapo_trl import *", namespace)
    assert set(rapo_trl.__all__) <= set(namespace)
    with pytest.raises(AttributeError, match="no attribute 'NotAThing'"):
        rapo_trl.NotAThing  # noqa: B018


def test_all_the_lazy_table_and_the_type_checking_imports_name_the_same_things():
    # Three lists, kept apart for ruff/type checkers (__all__, the imports) and the runtime (_LAZY).
    assert sorted(rapo_trl.__all__) == sorted(["__version__", *rapo_trl._LAZY])
    (block,) = [node for node in ast.parse(INIT.read_text()).body
                if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"]
    typed = {alias.name: node.module for node in block.body for alias in node.names}
    assert typed == rapo_trl._LAZY


def test_the_readme_and_the_notebook_import_only_names_that_are_exported():
    # That every documented import resolves (docs/ may import from deeper modules) is tests/test_docs_examples.py's.
    imports = rapo_trl_imports(python_blocks(README)) + rapo_trl_imports(notebook_code())
    assert ("rapo_trl", "RAPOTrainer") in imports  # the parsing found them
    for _, name in imports:
        assert name in rapo_trl.__all__, f"{name} (used in the README or notebook) is not in rapo_trl.__all__"


def test_the_docs_dotted_references_resolve():
    text = "\n".join(path.read_text() for path in [README, *docs()])
    references = set(re.findall(r"\brapo_trl(?:\.[A-Za-z_]\w*)+", text))
    assert references  # e.g. `rapo_trl.tools`
    for reference in sorted(references):
        parts = reference.split(".")
        # the longest importable module, then attributes
        for cut in range(len(parts), 0, -1):
            try:
                value = importlib.import_module(".".join(parts[:cut]))
                break
            except ModuleNotFoundError:
                continue
        for attribute in parts[cut:]:
            assert hasattr(value, attribute), reference
            value = getattr(value, attribute)


def test_the_package_is_marked_typed():
    # PEP 561; tests/test_packaging.py checks that the wheel and the sdist carry it too.
    assert resources.files("rapo_trl").joinpath("py.typed").is_file()
