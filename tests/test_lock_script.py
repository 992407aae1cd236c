"""scripts/lock.py, which scripts/setup.sh uses to hold every venv to constraints.txt (the tested set)."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

SCRIPTS = Path(__file__).parent.parent / "scripts"
sys.path.insert(0, str(SCRIPTS))
import lock  # noqa: E402


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPTS / "lock.py"), *map(str, args)], capture_output=True, text=True)


def test_a_written_lock_matches_the_venv_it_was_written_from(tmp_path):
    path = tmp_path / "constraints.txt"
    assert run("write", path).returncode == 0
    pins = lock.read(path)
    assert pins["transformers"] == version("transformers") and pins["trl"] == version("trl")
    assert not lock.UNLOCKED & set(pins)  # torch and the project itself stay out
    checked = run("check", path)
    assert checked.returncode == 0, checked.stderr
    assert run("drift", path).stdout.strip() == ""


def test_a_venv_that_drifted_is_named_with_the_pin_that_puts_it_back(tmp_path):
    path = tmp_path / "constraints.txt"
    path.write_text(f"# tested\ntransformers==0.0.1\npeft=={version('peft')}\nnot-installed-here==1.0\n")
    checked = run("check", path)
    assert checked.returncode == 1
    assert f"transformers {version('transformers')} (tested: 0.0.1)" in checked.stderr
    assert "peft" not in checked.stderr and "not-installed-here" not in checked.stderr
    assert run("drift", path).stdout.split() == ["transformers==0.0.1"]


def test_a_line_that_is_not_a_pin_is_refused(tmp_path):
    path = tmp_path / "constraints.txt"
    path.write_text("transformers>=5\n")
    result = run("check", path)
    assert result.returncode != 0 and "'transformers>=5' is not a 'name==version' pin" in result.stderr


def test_the_committed_lock_is_what_setup_installs_and_checks():
    setup = (SCRIPTS / "setup.sh").read_text()
    assert "LOCK=${RAPO_LOCK-constraints.txt}" in setup and 'PIP+=(-c "$LOCK")' in setup
    assert 'scripts/lock.py check "$LOCK"' in setup
    assert lock.read(SCRIPTS.parent / "constraints.txt")  # present and parseable
