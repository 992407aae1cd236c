"""Small modules with one concern: no source file over 600 lines but the sandbox's child (one file by design: it runs
before the package can be imported)."""

from pathlib import Path

import rapo_trl

PACKAGE = Path(rapo_trl.__file__).parent


def test_no_source_file_over_600_lines():
    sizes = {path.relative_to(PACKAGE).as_posix(): len(path.read_text().splitlines())
             for path in PACKAGE.rglob("*.py")}
    too_long = {name: n for name, n in sizes.items() if n > 600 and name != "tools/_sandbox_child.py"}
    assert not too_long
