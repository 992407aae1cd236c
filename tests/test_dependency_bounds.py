"""The core dependencies' lower bounds are versions this project was tested with: no older than the
installed (tested) minor version, except where pyproject.toml says why."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

tomllib = pytest.importorskip("tomllib")

PYPROJECT = Path(__file__).parent.parent / "pyproject.toml"
# Lower than the version installed here, on purpose (the reasons are in pyproject.toml's comments):
# torch stays at transformers 5's floor so pip keeps a preinstalled CUDA torch; transformers 5.17 is the
# version the GPU machine ran.
BELOW_INSTALLED = {"torch", "transformers"}


def _lower_bound(requirement: Requirement) -> Version | None:
    bounds = [Version(spec.version) for spec in requirement.specifier if spec.operator in (">=", "==", "~=")]
    return max(bounds) if bounds else None


def test_lower_bounds_are_the_tested_minor_versions():
    dependencies = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    checked = []
    for line in dependencies:
        requirement = Requirement(line)
        installed = Version(version(requirement.name))
        assert requirement.specifier.contains(installed, prereleases=True), (line, installed)
        bound = _lower_bound(requirement)
        if bound is None or requirement.name in BELOW_INSTALLED:
            continue
        assert (bound.release + (0,))[:2] >= installed.release[:2], (
            f"{line}: tested with {installed}; raise the bound to >={installed.major}.{installed.minor}"
        )
        checked.append(requirement.name)
    assert {"sentence-transformers", "math-verify", "matplotlib"} <= set(checked)
