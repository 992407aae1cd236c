"""pyproject.toml's ranges and constraints.txt, the tested set: the lock sits inside the ranges, the lower bounds are
the tested minor versions (except where pyproject.toml says why), and trl and transformers, whose private parts
rapo_trl uses, are capped at the newest minor the suite has passed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import lock  # noqa: E402  (scripts/lock.py)

# Lower than the tested version, on purpose (the reasons are in pyproject.toml's comments):
# torch stays at transformers 5's floor so pip keeps a preinstalled CUDA torch; transformers 5.17 is the
# version the GPU machine ran.
BELOW_TESTED = {"torch", "transformers"}
CAPPED = {"trl", "transformers"}  # private parts used: rapo_trl/internals.py


def _dependencies() -> list[Requirement]:
    return [Requirement(line) for line in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]]


def _tested() -> dict[str, str]:
    return lock.read(ROOT / "constraints.txt")


def _lower_bound(requirement: Requirement) -> Version | None:
    bounds = [Version(spec.version) for spec in requirement.specifier if spec.operator in (">=", "==", "~=")]
    return max(bounds) if bounds else None


def test_every_dependency_is_locked_inside_its_range():
    tested = _tested()
    for requirement in _dependencies():
        name = canonicalize_name(requirement.name)
        if name in lock.UNLOCKED:
            continue
        assert name in tested, f"{requirement.name} is not in constraints.txt: run `make test-latest` then `make lock`"
        assert requirement.specifier.contains(tested[name], prereleases=True), (str(requirement), tested[name])


def test_lower_bounds_are_the_tested_minor_versions():
    tested, checked = _tested(), []
    for requirement in _dependencies():
        bound, name = _lower_bound(requirement), canonicalize_name(requirement.name)
        if bound is None or name in BELOW_TESTED | lock.UNLOCKED:
            continue
        version = Version(tested[name])
        assert (bound.release + (0,))[:2] >= version.release[:2], (
            f"{requirement}: tested with {version}; raise the bound to >={version.major}.{version.minor}"
        )
        checked.append(name)
    assert {"sentence-transformers", "math-verify", "matplotlib"} <= set(checked)


def test_trl_and_transformers_are_capped_at_the_tested_minor():
    tested = _tested()
    for requirement in _dependencies():
        if canonicalize_name(requirement.name) not in CAPPED:
            continue
        caps = [Version(spec.version) for spec in requirement.specifier if spec.operator == "<"]
        version = Version(tested[canonicalize_name(requirement.name)])
        assert caps == [Version(f"{version.major}.{version.minor + 1}")], (
            f"{requirement}: tested with {version}; cap it at <{version.major}.{version.minor + 1}"
        )
