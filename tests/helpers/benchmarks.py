"""A benchmark script loaded by path as a module (``benchmarks/`` is not a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_bench(name: str):
    """``benchmarks/<name>.py`` as a module, its module-level setup run, with ``benchmarks/`` on the import path as
    running a script from there puts it (the report's modules import each other by name). Registered under its name
    while it runs, as an imported module is (a dataclass looks its module up there)."""
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
