"""What the sandbox holds against, with real subprocesses: a SIGKILLed caller, host UNIX sockets,
concurrent calls reading each other, host files (a reward-hacking channel in RL), and memory spread
over several processes. Each test fails on the sandbox as it was before (per-process limits only, a
shared temp folder, the host's files read-only but visible)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

from rapo_trl.tools import PythonTool, ToolError, run_tool_calls
from tests.helpers.leaks import alive

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sandbox layers are Linux-only")
TOOL = PythonTool(timeout=10.0)
REPORT = TOOL.isolation() if sys.platform.startswith("linux") else {}
# Where namespaces work (root, or unprivileged user namespaces), the minimal view must be built.
minimal_view = pytest.mark.skipif(not REPORT.get("namespaces"), reason="no namespaces here: no minimal view")


def _cgroups_allowed() -> bool:
    from rapo_trl.tools.sandbox_cgroup import CallCgroup

    group = CallCgroup.create(64) if sys.platform.startswith("linux") else None
    if group is None:
        return False
    group.remove()
    return True


def _env():
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as handle:
                    fields = handle.read().rsplit(b")", 1)[-1].split()
                if int(fields[1]) == pid:
                    found.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return found


_CALLER = textwrap.dedent(
    """
    import sys
    from rapo_trl.tools import PythonTool

    tool = PythonTool(timeout=120.0, cpu_seconds=120.0)
    print("calling", flush=True)
    tool.run(sys.argv[1])
    """
)


def test_a_sigkilled_caller_leaves_no_process_and_no_folder():
    suffix = f"{os.getpid()}-{time.monotonic_ns()}"
    marker = f"rapo-orphan-{suffix}"
    # The code starts a grandchild that leaves the process group (findable by the marker in its
    # command line; the caller's own command line holds the marker only in two pieces), then
    # sleeps far past the moment its caller is killed.
    code = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)', 'rapo-orphan-' + "
        f"'{suffix}'], start_new_session=True)\n"
        "time.sleep(120)"
    )
    caller = subprocess.Popen(
        [sys.executable, "-c", _CALLER, code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env()
    )
    assert caller.stdout.readline().strip() == b"calling"
    deadline = time.monotonic() + 30
    marked = []
    while time.monotonic() < deadline and not marked:
        marked = [pid for pid in _all_pids() if marker.encode() in _cmdline(pid)]
        time.sleep(0.05)
    assert marked, "the sandboxed code never started its grandchild"
    sandbox = _children(caller.pid)
    tree = set(sandbox + marked + [c for pid in sandbox for c in _children(pid)])
    assert len(tree) >= 3 and all(alive(pid) for pid in tree)  # the bootstrap, the code, its grandchild
    os.kill(caller.pid, signal.SIGKILL)
    caller.wait(timeout=30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(alive(pid) for pid in tree):
        time.sleep(0.05)
    assert not [pid for pid in tree if alive(pid)], "sandbox processes outlived their caller"
    left = list(Path(tempfile.gettempdir()).glob(f"rapo-python-{caller.pid}-*"))
    assert not left, f"the killed caller left {left}"
    cgroups = list(Path("/sys/fs/cgroup").glob(f"**/rapo-python-{caller.pid}-*"))
    assert not cgroups, f"the killed caller left {cgroups}"


def _all_pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def test_a_host_unix_socket_is_unreachable():
    folder = Path(tempfile.mkdtemp(prefix="rapo-socket-test-"))
    folder.chmod(0o777)
    path = folder / "host.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        path.chmod(0o777)  # world-writable: only the sandbox can keep the code from it
        listener.listen(1)
        listener.settimeout(1.0)
        code = (
            "import socket\n"
            "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
            f"s.connect({str(path)!r})\n"
            "s.sendall(b'hello host')\n"
            "print('connected')"
        )
        with pytest.raises(ToolError) as caught:
            TOOL.run(code)
        assert "connected" not in str(caught.value).replace("connect(", "")
        with pytest.raises(TimeoutError):
            listener.accept()
    path.unlink()
    folder.rmdir()


def test_concurrent_calls_cannot_read_each_other():
    secret = f"S3CRET-{time.monotonic_ns()}"
    writer = (
        "import time\n"
        f"open('notes.txt', 'w').write('{secret}')\n"
        f"print('{secret}', flush=True)\n"
        "time.sleep(3)"
    )
    # The snooper looks everywhere a call's files could be: its own /tmp and cwd, the host's temp dir.
    snooper = textwrap.dedent(
        f"""
        import os, sys, time
        time.sleep(1)
        found = []
        interpreter = os.path.realpath(sys.prefix)  # read-only in the view; below /tmp when the checkout is
        for top in {{"/tmp", os.getcwd(), {tempfile.gettempdir()!r}}}:
            for folder in os.listdir(top):  # unlistable folders may still hold guessable names
                for name in ("code.py", "stdout", "work/notes.txt"):
                    try:
                        with open(os.path.join(top, folder, name), "rb") as handle:
                            if b"{secret}" in handle.read(1 << 20):
                                found.append(os.path.join(top, folder, name))
                    except OSError:
                        pass
            for root, dirs, files in os.walk(top):
                dirs[:] = [d for d in dirs if not os.path.realpath(os.path.join(root, d)).startswith(interpreter)]
                for name in files:
                    try:
                        with open(os.path.join(root, name), "rb") as handle:
                            if b"{secret}" in handle.read(1 << 20):
                                found.append(os.path.join(root, name))
                    except OSError:
                        pass
        print("found", found)
        """
    )
    results = run_tool_calls([(TOOL, writer), (TOOL, snooper)], max_workers=2)
    assert results[0].ok and results[0].output.strip() == secret
    assert results[1].ok, results[1].output
    assert results[1].output.strip() == "found []"


@minimal_view
def test_host_files_are_out_of_sight():
    assert REPORT["filesystem"] == "minimal", REPORT
    here = Path(__file__).resolve()
    source = Path(sys.modules["rapo_trl"].__file__).resolve()
    code = textwrap.dedent(
        f"""
        import os
        for path in [{str(here)!r}, {str(source)!r}, os.path.expanduser("~root/.cache"), "/proc/1/environ"]:
            try:
                open(path, "rb").read(16)
                print("READ", path)
            except OSError as error:
                print("hidden", type(error).__name__)
        print(sorted(os.listdir("/")))
        """
    )
    lines = TOOL.run(code).splitlines()
    assert not [line for line in lines if line.startswith("READ")], lines
    listing = eval(lines[-1])  # noqa: S307 - our own code's repr of a list of names
    assert set(listing) <= {"usr", "bin", "sbin", "lib", "lib64", "lib32", "libx32", "etc", "dev", "proc", "tmp",
                            *(part for part in {str(p).split("/")[1] for p in REPORT["visible"]})}  # fmt: skip
    # The checkout's top folder is absent unless the view shows part of it (a venv inside it) or it is
    # /tmp (a clone made by mktemp), which the view replaces by the call's private tmpfs.
    assert here.parts[1] not in listing or here.parts[1] in {"tmp", *(p.split("/")[1] for p in REPORT["visible"])}


def test_installed_packages_still_import_in_the_view():
    assert TOOL.run("import numpy, json, ssl, decimal, sqlite3\nint(numpy.arange(4).sum())") == "6\n"


@pytest.mark.skipif(not _cgroups_allowed(), reason="this process may not create a memory cgroup here")
def test_memory_is_capped_for_the_call_as_a_whole():
    # Four processes of 400 MB each: every one is under the 1024 MB per-process limit, their sum is not.
    code = textwrap.dedent(
        """
        import os, time
        children = []
        for _ in range(3):
            pid = os.fork()
            if pid == 0:
                block = b"x" * (400 * 1024 * 1024)
                time.sleep(2)
                os._exit(0)
            children.append(pid)
        block = b"x" * (400 * 1024 * 1024)
        time.sleep(2)
        print([os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children])
        """
    )
    tool = PythonTool(timeout=30.0, memory_mb=1024)
    try:
        output = tool.run(code)
    except ToolError as error:
        assert "MemoryError" in str(error) or "killed" in str(error)
    else:  # the kernel may pick a child to kill: then the code sees it die
        assert "-9" in output, output
    assert PythonTool(timeout=30.0, memory_mb=1024, call_memory_cap=False).run(code).strip() == "[0, 0, 0]"


def test_many_sandboxes_at_once_leave_no_cgroup_or_folder_behind():
    before = set(os.listdir(tempfile.gettempdir()))
    threads = [threading.Thread(target=TOOL.run, args=(f"{i} * 2",)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    mine = f"rapo-python-{os.getpid()}-"
    assert not [n for n in set(os.listdir(tempfile.gettempdir())) - before if n.startswith(mine)]
    assert not list(Path("/sys/fs/cgroup").glob(f"**/{mine}*"))


_CALLER_WITHOUT_NAMESPACES = _CALLER.replace("PythonTool(timeout=", "PythonTool(isolate=False, timeout=")


def test_without_namespaces_the_code_still_dies_with_its_caller_and_its_folder_is_swept(monkeypatch):
    from rapo_trl.tools import python_tool

    caller = subprocess.Popen(
        [sys.executable, "-c", _CALLER_WITHOUT_NAMESPACES, "import time\ntime.sleep(120)"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(),
    )  # fmt: skip
    assert caller.stdout.readline().strip() == b"calling"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not list(Path(tempfile.gettempdir()).glob(f"rapo-python-{caller.pid}-*")):
        time.sleep(0.05)
    sandbox = _children(caller.pid)
    assert sandbox and all(alive(pid) for pid in sandbox)
    os.kill(caller.pid, signal.SIGKILL)
    caller.wait(timeout=30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(alive(pid) for pid in sandbox):
        time.sleep(0.05)
    assert not [pid for pid in sandbox if alive(pid)], "the code outlived its caller"
    # Its folder is left (nothing was alive to remove it) until the next PythonTool process sweeps.
    (left,) = Path(tempfile.gettempdir()).glob(f"rapo-python-{caller.pid}-*")
    monkeypatch.setattr(python_tool, "_SWEPT", False)
    PythonTool(timeout=5.0, isolate=False).run("1")
    assert not left.exists()


@minimal_view
def test_an_interpreter_below_tmp_still_runs_in_the_minimal_view(tmp_path):
    """A virtualenv in a checkout under /tmp (as a CI clone may be) must stay visible inside the view,
    although the view's own /tmp is a private tmpfs; and only the interpreter, not its neighbours."""
    checkout = Path(tempfile.mkdtemp(prefix="rapo-venv-", dir="/tmp"))
    try:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(checkout / ".venv")], check=True)
        (checkout / "answers.txt").write_text("42")
        tool = PythonTool(python=str(checkout / ".venv" / "bin" / "python"))
        out = tool.run(f"import os, sys\nprint(sys.prefix)\nprint(os.path.exists({str(checkout / 'answers.txt')!r}))")
        assert out.split() == [str(checkout / ".venv"), "False"]
    finally:
        import shutil

        shutil.rmtree(checkout, ignore_errors=True)


@minimal_view
def test_a_virtualenv_reached_through_a_symlink_into_a_hidden_folder_still_runs(tmp_path):
    """A project's .venv may be a symlink to a virtualenv elsewhere (here below /tmp, which the view
    replaces): the interpreter knows its prefix, site-packages and executable by the link's path, so
    the view must show them there, not only at the real path."""
    real = Path(tempfile.mkdtemp(prefix="rapo-venv-", dir="/tmp"))
    try:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(real / "venv")], check=True)
        (site,) = (real / "venv" / "lib").glob("python*/site-packages")
        (site / "rapo_probe.py").write_text("VALUE = 42\n")
        project = tmp_path / "project"
        project.mkdir()
        (project / ".venv").symlink_to(real / "venv")
        tool = PythonTool(python=str(project / ".venv" / "bin" / "python"))
        out = tool.run("import os, sys, rapo_probe\nprint(sys.prefix, rapo_probe.VALUE, os.path.exists(sys.executable))")
        assert out.split() == [str(project / ".venv"), "42", "True"]
    finally:
        import shutil

        shutil.rmtree(real, ignore_errors=True)


@minimal_view
def test_an_interpreter_named_by_a_symlink_in_a_hidden_folder_still_runs(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").symlink_to(os.path.realpath(sys.executable))
    tool = PythonTool(python=str(tmp_path / "bin" / "python"))
    out = tool.run("import os, sys\nprint(sys.executable, os.path.exists(sys.executable))")
    assert out.split() == [str(tmp_path / "bin" / "python"), "True"]


def test_a_path_below_a_symlink_in_the_view_gets_no_mount_point_of_its_own(tmp_path):
    """``/bin -> usr/bin`` is recreated as a link in the view, so an interpreter named ``/bin/python3`` is
    visible through it; a mount point made for it would go through the link into the host's ``/usr/bin``
    (and truncate the host's python3). Checked on a copy of that layout, never on the host's own."""
    from rapo_trl.tools import _sandbox_child

    (tmp_path / "usr" / "bin").mkdir(parents=True)
    (tmp_path / "usr" / "bin" / "python3").touch()
    (tmp_path / "bin").symlink_to("usr/bin")
    paths = [str(tmp_path / p) for p in ("bin", "usr", "bin/python3", "usr/bin/python3", "missing")]
    assert _sandbox_child._view_paths(paths) == paths[:2]


def test_a_prefix_that_links_to_the_root_is_never_bound(tmp_path, monkeypatch):
    """A prefix reached through a link to ``/`` would bind the host's whole tree (read-only) into the view."""
    from rapo_trl.tools import _sandbox_child

    root_link = tmp_path / "rootlink"
    root_link.symlink_to("/")
    monkeypatch.setattr(sys, "base_prefix", str(root_link))
    prefixes = _sandbox_child._prefixes()
    assert str(root_link) not in prefixes and "/" not in prefixes
    assert os.path.realpath(sys.prefix) in prefixes  # the real prefixes are still there


@minimal_view
def test_an_installed_rapo_trl_is_hidden_from_the_code():
    """Installed from a wheel, rapo_trl sits in the interpreter's site-packages, which the view shows: its held-out
    stories (``data/stories``) and the task generators that draw eval questions with their answers must not be
    readable by the policy's code."""
    real = Path(tempfile.mkdtemp(prefix="rapo-venv-", dir="/tmp"))
    try:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(real / "venv")], check=True)
        (site,) = (real / "venv" / "lib").glob("python*/site-packages")
        stories = site / "rapo_trl" / "data" / "stories"
        stories.mkdir(parents=True)
        (stories / "templates.yaml").write_text("held_out: a story eval asks\n")
        (site / "rapo_trl" / "__init__.py").write_text("")
        (site / "rapo_probe.py").write_text("VALUE = 42\n")
        tool = PythonTool(python=str(real / "venv" / "bin" / "python"))
        out = tool.run(f"import os, rapo_probe\nprint(rapo_probe.VALUE, os.path.exists({str(stories)!r}), "
                       f"os.listdir({str(site / 'rapo_trl')!r}))")
        assert out.split() == ["42", "False", "[]"]
    finally:
        import shutil

        shutil.rmtree(real, ignore_errors=True)
