"""The tested set of package versions (constraints.txt): compare a venv with it, or write it from a venv.

    python scripts/lock.py check constraints.txt   # exit 1 and name each package whose version differs
    python scripts/lock.py drift constraints.txt   # print the tested pin (name==version) of each that differs
    python scripts/lock.py write constraints.txt   # pin every installed distribution (torch and rapo_trl excepted)

Run it with the venv's own interpreter: it reads that environment's installed distributions. Standard library only,
so it runs in well under a second (scripts/setup.sh calls ``check`` on every run).
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

# torch comes first and separately (scripts/setup.sh: the CPU build on a machine without CUDA, the image's own
# CUDA build elsewhere), so its version is not locked here; rapo_trl is the project itself.
UNLOCKED = {"torch", "rapo-trl"}

HEADER = """\
# The versions `make test` last passed with (Python {python}), written by `make lock` (scripts/lock.py).
# scripts/setup.sh installs with `pip install -c constraints.txt` and checks the venv against this file, so every
# fresh machine gets this set. pyproject.toml keeps the ranges users install from; `make test-latest` tries the
# newest versions they allow in .venv-latest. torch is installed first and separately (see scripts/setup.sh).
"""


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed() -> dict[str, str]:
    versions = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            versions[canonical(name)] = dist.version
    return versions


def read(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep:
            raise SystemExit(f"{path}: {line!r} is not a 'name==version' pin")
        pins[canonical(name)] = version.strip()
    return pins


def drifted(pins: dict[str, str], have: dict[str, str]) -> list[str]:
    """The installed packages whose version is not the tested one (packages not installed are not asked for)."""
    return [name for name in sorted(pins) if name in have and have[name] != pins[name]]


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in {"check", "drift", "write"}:
        print(__doc__, file=sys.stderr)
        return 2
    command, path = argv[0], Path(argv[1])
    have = installed()
    if command == "write":
        pins = {n: v for n, v in have.items() if n not in UNLOCKED and n not in {"pip", "setuptools", "wheel"}}
        body = "".join(f"{name}=={version}\n" for name, version in sorted(pins.items()))
        path.write_text(HEADER.format(python=".".join(map(str, sys.version_info[:2]))) + body)
        print(f"{path}: {len(pins)} pins")
        return 0
    pins = read(path)
    names = drifted(pins, have)
    if command == "drift":
        print(" ".join(f"{name}=={pins[name]}" for name in names))
        return 0
    if names:
        listed = "; ".join(f"{name} {have[name]} (tested: {pins[name]})" for name in names)
        print(f"this venv differs from {path} in {len(names)} package(s): {listed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
