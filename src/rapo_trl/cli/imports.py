"""Objects named on the command line by import path (``pkg.module.name``), as ``trl grpo --reward_funcs`` takes them."""

from __future__ import annotations

import importlib
import os
import sys


def is_import_path(name: str) -> bool:
    """``pkg.module.name`` (or ``pkg.module:name``): a dotted name, not a file path."""
    return ("." in name or ":" in name) and "/" not in name and not name.endswith((".py", ".json", ".jsonl"))


def import_object(path: str, what: str):
    """The object at ``path``; the working directory is importable, as in ``trl grpo``. ``what`` names it in errors."""
    from rapo_trl.cli.common import UsageError

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
