"""The sandbox bootstrap as a normal (non-root) user: the path a laptop or a rootless container takes.

Needs root here only to become ``nobody`` for the test, and a system ``python3`` that ``nobody`` can run
(the bootstrap is standard-library only). Skipped where either is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from rapo_trl.tools import python_tool

NOBODY = 65534
SYSTEM_PYTHON = "/usr/bin/python3"


def _runnable_by_nobody() -> bool:
    if not sys.platform.startswith("linux") or os.geteuid() != 0 or not os.path.exists(SYSTEM_PYTHON):
        return False
    probe = subprocess.run([SYSTEM_PYTHON, "-I", "-c", "pass"], user=NOBODY, group=NOBODY, check=False)
    return probe.returncode == 0


pytestmark = pytest.mark.skipif(not _runnable_by_nobody(), reason="needs root and a python3 nobody can run")

CODE = """
import os, socket, resource
print("pid", os.getpid())
open("inside.txt", "w").write("ok")
print(open("inside.txt").read())
for target in ["{outside}", "/dev/shm/rapo-escape-{tag}.txt"]:
    try:
        open(target, "w").write("x")
        print("WROTE", target)
    except OSError as error:
        print("blocked", error.strerror)
try:
    socket.create_connection(("127.0.0.1", 9), timeout=1)
    print("CONNECTED")
except OSError as error:
    print("net", error.strerror)
"""


@pytest.fixture
def open_dir():
    """A temp dir that ``nobody`` can reach (pytest's own tmp_path sits below a root-only folder)."""
    path = Path(tempfile.mkdtemp(prefix="rapo-unprivileged-"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_bootstrap_as_normal_user(open_dir):
    tmp_path = open_dir
    outside = tmp_path / "outside.txt"
    code = tempfile.TemporaryFile()
    code.write(CODE.format(outside=outside, tag=os.getpid()).encode())
    code.seek(0)
    report_read, report_write = os.pipe()
    config = {
        "code_fd": code.fileno(),
        "parent_pid": os.getpid(),
        "report_fd": report_write,
        "uid": None,
        "namespaces": True,
        "memory_mb": 512,
        "cpu_seconds": 5,
        "max_processes": 16,
        "max_file_mb": 1,
        "max_disk_mb": 8,
        "show_last_expression": True,
    }
    child = Path(python_tool.__file__).with_name("_sandbox_child.py")
    result = subprocess.run(
        [SYSTEM_PYTHON, "-I", "-B", str(child), json.dumps(config)],
        cwd="/",
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
        pass_fds=(report_write, code.fileno()),
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    os.close(report_write)
    code.close()
    with os.fdopen(report_read) as handle:
        report_text = handle.read()
    assert result.returncode == 0, result.stderr
    report = json.loads(report_text)
    lines = result.stdout.splitlines()
    assert "ok" in lines and "CONNECTED" not in result.stdout and "WROTE" not in result.stdout
    assert not outside.exists()
    assert report["root"] is False and report["no_new_privs"] is True
    if report["namespaces"]:  # an unprivileged user namespace was allowed
        assert report["network"] == "namespace" and report["filesystem"] in ("minimal", "read-only")
        # The host's folders are absent from the minimal view, read-only in the fallback one.
        assert lines[0] == "pid 1" and lines.count("blocked Read-only file system") + lines.count(
            "blocked No such file or directory"
        ) == 2
        assert lines[-1] == "net Network is unreachable"
    else:
        assert report["network"] == "socket-patch"
        assert Path(report["workdir"]).name.startswith(f"rapo-python-{os.getpid()}-")  # PythonTool removes it
        shutil.rmtree(report["workdir"], ignore_errors=True)
