"""The sandbox bootstrap as a normal (non-root) user: the path a laptop or a rootless container takes.

Needs root here only to become ``nobody`` for the test, and a system ``python3`` that ``nobody`` can run
(the bootstrap is standard-library only). Skipped where either is missing. ``nobody`` runs a copy of the
bootstrap in a folder it can read, as a normal user runs the one in their own checkout: this checkout may
sit below a folder closed to others (a clone in ``/root``, mode 0700).
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

from rapo_trl.tools import PythonTool, ToolError, python_tool

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
try:
    open("{outside}", "w").write("x")
    print("WROTE {outside}")
except OSError as error:
    print("blocked", error.strerror)
try:  # the call's own /dev/shm where namespaces allow one (multiprocessing needs it), else the host's
    open("{shm}", "w").write("x")
    print("shm written")
except OSError as error:
    print("shm", error.strerror)
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
    shm = Path(f"/dev/shm/rapo-escape-{os.getpid()}.txt")
    code.write(CODE.format(outside=outside, shm=shm).encode())
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
    # A normal user's own bootstrap: readable by them wherever this checkout lies.
    child = tmp_path / "_sandbox_child.py"
    shutil.copyfile(Path(python_tool.__file__).with_name("_sandbox_child.py"), child)
    child.chmod(0o644)
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
        # The host's folders are absent from the minimal view, read-only in the fallback one. The code is pid 2:
        # pid 1 is the namespace's init.
        assert lines[0] == "pid 2" and lines.count("blocked Read-only file system") + lines.count(
            "blocked No such file or directory"
        ) == 1
        assert "shm written" in lines and not shm.exists()  # written to the call's own tmpfs, not the host's
        assert lines[-1] == "net Network is unreachable"
    else:
        assert report["network"] == "socket-patch"
        assert Path(report["workdir"]).name.startswith(f"rapo-python-{os.getpid()}-")  # PythonTool removes it
        shutil.rmtree(report["workdir"], ignore_errors=True)
        shm.unlink(missing_ok=True)


def test_a_root_caller_whose_bootstrap_is_closed_to_others_still_runs_the_code_under_its_own_uid(monkeypatch):
    """The product's path from a checkout in a 0700 folder: the bootstrap starts as the caller (root), is
    read before it drops to the call's uid, and nothing after the drop reads it again (a traceback
    included), so the sandbox works with the bootstrap closed to that uid."""
    closed = Path(tempfile.mkdtemp(prefix="rapo-closed-"))
    try:
        closed.chmod(0o700)
        child = closed / "_sandbox_child.py"
        shutil.copyfile(Path(python_tool.__file__).with_name("_sandbox_child.py"), child)
        child.chmod(0o600)
        monkeypatch.setattr(python_tool, "_CHILD", str(child))
        tool = PythonTool(timeout=10.0)
        report = tool.isolation()
        uid = int(tool.run("import os\nprint(os.getuid())"))
        if report["namespaces"]:  # root with namespaces always drops to a uid of the call's own
            assert report["uid"] != 0 and uid != 0
        with pytest.raises(ToolError) as caught:
            tool.run("x = 1\nraise ValueError('from the code')")
        assert "ValueError: from the code" in str(caught.value) and "Sandbox setup failed" not in str(caught.value)
    finally:
        shutil.rmtree(closed, ignore_errors=True)
