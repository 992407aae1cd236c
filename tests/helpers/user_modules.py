"""Modules a test writes as a user would (``my_tools.py`` in the working directory) share names across tests."""

from __future__ import annotations

import sys


def import_fresh(monkeypatch, *names: str) -> None:
    """Make the next ``import`` of each name load the test's own file, and leave none of them imported after the test:
    a module of the same name that another test imported (from its own folder) stays out of this one, and this one's
    out of the next."""
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)  # records the name's state before, which teardown restores
        del sys.modules[name]
