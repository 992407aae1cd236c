"""PythonTool against real subprocesses: outputs, errors, limits and containment (no mocks)."""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import threading
import time

import pytest

from rapo_trl.tools import PythonTool, ToolError, run_tool_calls
from rapo_trl.tools.python_tool import strip_code_fences
from tests.helpers.leaks import descendants

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sandbox layers are Linux-only")
TOOL = PythonTool(timeout=5.0)


def _error_of(tool: PythonTool, code: str) -> str:
    with pytest.raises(ToolError) as caught:
        tool.run(code)
    return str(caught.value)


def _live_sandboxes(caller: int | None = None) -> int:
    """Live (non-zombie) processes started from the sandbox bootstrap by ``caller`` (default: this
    process; other programs on the host may be running sandboxes of their own)."""
    count = 0
    for pid in descendants(caller):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                count += b"_sandbox_child.py" in handle.read()
        except OSError:
            continue
    return count


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("print('hello')", "hello\n"),
        ("x = 6\nx * 7", "42\n"),  # last bare expression printed
        ("'abc'", "'abc'\n"),  # as its repr, like a notebook
        ("print(1)\nNone", "1\n"),  # None is not printed
        ("def f():\n    return 3\nf()", "3\n"),
        ("x = 1", ""),  # ends in an assignment: nothing printed
        ("```python\nprint(2 + 2)\n```", "4\n"),  # markdown fences stripped
        ("import math\nmath.factorial(10)", "3628800\n"),
    ],
)
def test_outputs(code, expected):
    assert TOOL.run(code) == expected


def test_strip_code_fences():
    assert strip_code_fences("Here:\n```py\n    a = 1\n    a\n```\nthanks") == "a = 1\na"
    assert strip_code_fences("print(1)") == "print(1)"


def test_a_fence_inside_a_string_of_the_code_is_kept():
    code = 'table = """\n```python\nprint(0)\n```\n"""\nprint(table.count("`"))'
    assert strip_code_fences(code) == code
    assert TOOL.run(code) == "6\n"


def test_installed_packages_and_workdir_usable():
    code = "import numpy as np\nopen('data.txt', 'w').write('7')\nint(open('data.txt').read()) + int(np.arange(3).sum())"
    assert TOOL.run(code) == "10\n"


def test_syntax_error_reports_the_line():
    error = _error_of(TOOL, "def f(:\n    pass")
    assert "SyntaxError" in error and 'File "<code>", line 1' in error and "_sandbox_child" not in error


def test_exception_reports_traceback_tail_and_partial_output():
    error = _error_of(TOOL, "print('before')\n1 / 0")
    assert error.startswith("before")
    assert 'File "<code>", line 2' in error and "ZeroDivisionError: division by zero" in error
    assert "_sandbox_child" not in error  # the bootstrap's own frame is hidden


def test_stderr_reaches_the_model_only_with_a_failure():
    code = "import sys, warnings\nwarnings.warn('rounded')\nprint('note', file=sys.stderr)\nprint(42)"
    assert TOOL.run(code) == "42\n"
    error = _error_of(TOOL, code + "\n1 / 0")
    assert error.startswith("42\n") and "UserWarning: rounded" in error and "note" in error


def test_empty_code_is_an_error():
    assert "No code to run" in _error_of(TOOL, "  \n")


def test_failures_are_counted_by_the_runner():
    calls = run_tool_calls([(TOOL, "1/0"), (TOOL, "print('ok')"), (TOOL, "exit(3)")])
    assert [call.ok for call in calls] == [False, True, False]
    assert calls[0].output.startswith("Error:") and "ZeroDivisionError" in calls[0].output
    assert calls[2].output.startswith("Error:")


def test_an_exit_status_is_named_after_the_output():
    error = _error_of(TOOL, "print('partial')\nimport sys\nsys.exit(3)")
    assert error.startswith("partial") and "exited with status 3" in error


def test_output_is_capped():
    tool = PythonTool(timeout=5.0, max_output_chars=100)
    output = tool.run("print('x' * 5000)")
    assert output.startswith("x" * 100) and "x" * 101 not in output and "truncated" in output
    error = _error_of(tool, "print('y' * 5000)\nraise ValueError('boom')")
    assert len(error) < 400 and "ValueError: boom" in error


def test_output_cut_before_a_failure_is_marked_as_cut():
    # The error text shows the output's head: without the note the model would take it for all the code printed.
    tool = PythonTool(timeout=5.0, max_output_chars=100)
    error = _error_of(tool, "print('y' * 5000)\nraise ValueError('boom')")
    assert error.startswith("y" * 100 + "\n... [output truncated: showing the first 100 characters]\n")
    assert error.endswith("ValueError: boom")
    assert "truncated" not in _error_of(tool, "print('short')\nraise ValueError('boom')")


def test_the_code_gets_no_command_line_arguments():
    # As a script run without arguments: the bootstrap's own (its config) are none of the code's.
    assert TOOL.run("import sys\nsys.argv") == "['<code>']\n"
    code = "import argparse\nparser = argparse.ArgumentParser()\nparser.add_argument('--n', type=int, default=5)\n"
    assert TOOL.run(code + "parser.parse_args().n") == "5\n"


def test_the_code_is_the_main_module():
    # unittest, doctest and pickle find the code's names through sys.modules["__main__"]: were that the sandbox
    # bootstrap, a failing test suite would run no test and pass.
    tests = "import unittest\nclass T(unittest.TestCase):\n    def test_a(self):\n        self.assertEqual(1, 2)\n"
    error = _error_of(TOOL, tests + "unittest.main()")
    assert "Ran 1 test" in error and "FAILED (failures=1)" in error
    doctests = 'def sq(x):\n    """\n    >>> sq(3)\n    10\n    """\n    return x * x\nimport doctest\n'
    assert TOOL.run(doctests + "doctest.testmod().failed").endswith("\n1\n")
    assert TOOL.run("import pickle\nclass A:\n    x = 3\npickle.loads(pickle.dumps(A())).x") == "3\n"
    assert TOOL.run("import __main__\nv = 7\n__main__.v") == "7\n"


def test_code_that_closes_or_replaces_its_stdout_keeps_its_output():
    # As a script's: the bootstrap flushing the closed stream afterwards is no failure of the code's.
    assert TOOL.run("import sys\nprint('bye')\nsys.stdout.close()") == "bye\n"
    # A last line without its newline is written, as at a script's exit, after the code replaced sys.stdout too.
    assert TOOL.run("import io, sys\nsys.stdout.write('kept')\nsys.stdout = io.StringIO()") == "kept"


def test_environment_is_scrubbed(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    assert TOOL.run("import os\nos.environ.get('HF_TOKEN'), 'PYTHONPATH' in os.environ") == "(None, False)\n"


def test_concurrent_calls_return_in_order():
    calls = [(TOOL, f"import time\ntime.sleep(0.{i % 3})\n{i} ** 2") for i in range(12)]
    calls.insert(5, (TOOL, "raise RuntimeError('row 5')"))
    start = time.monotonic()
    results = run_tool_calls(calls, max_workers=6)
    expected = [f"{i**2}\n" for i in range(12)]
    expected.insert(5, None)
    for result, want in zip(results, expected):
        assert result.ok is (want is not None)
        assert result.output == want if want else "RuntimeError: row 5" in result.output
    assert time.monotonic() - start < 15


# Containment: each runaway returns an error within a bounded time and leaves the host as it was.


@linux_only
def test_infinite_loop_times_out():
    tool = PythonTool(timeout=1.5)
    start = time.monotonic()
    assert "time limit" in _error_of(tool, "while True:\n    pass")
    assert time.monotonic() - start < 5
    assert _live_sandboxes() == 0


def test_a_timed_out_call_shows_what_it_printed_before():
    error = _error_of(PythonTool(timeout=1.5), "print('step 1 done')\nimport time\ntime.sleep(60)")
    assert "time limit" in error and error.startswith("step 1 done")


@linux_only
def test_cpu_limit_ends_a_busy_loop_before_the_wall_clock():
    tool = PythonTool(timeout=20.0, cpu_seconds=1)
    start = time.monotonic()
    assert "CPU time limit" in _error_of(tool, "while True:\n    pass")
    assert time.monotonic() - start < 6


@linux_only
def test_ten_gigabyte_allocation_fails_fast():
    start = time.monotonic()
    assert "MemoryError" in _error_of(TOOL, "x = bytearray(10 * 1024 ** 3)")
    assert time.monotonic() - start < 5


@linux_only
def test_fork_bomb_is_contained():
    before = len([p for p in os.listdir("/proc") if p.isdigit()])
    tool = PythonTool(timeout=2.0)
    start = time.monotonic()
    error = _error_of(
        tool, "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    )
    assert "time limit" in error or "Error" in error
    assert time.monotonic() - start < 8
    assert _live_sandboxes() == 0
    deadline = time.monotonic() + 5  # zombies of the bomb wait for init to reap them
    while len([p for p in os.listdir("/proc") if p.isdigit()]) > before + 10 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len([p for p in os.listdir("/proc") if p.isdigit()]) <= before + 10
    assert TOOL.run("1 + 1") == "2\n"  # the host still runs sandboxes


@linux_only
def test_escaped_background_process_is_killed():
    code = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\nprint('parent')"
    assert TOOL.run(code) == "parent\n"
    report = TOOL.isolation()
    # The pid namespace (or, as root, the dedicated uid) reaches a child that left the process group.
    if report.get("pid_namespace") or report["uid"] != os.getuid():
        assert _live_sandboxes() == 0


@linux_only
@pytest.mark.parametrize(
    ("code", "name"),
    [
        ("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\nprint('survived')", "SIGTERM"),
        ("import signal\nsignal.raise_signal(signal.SIGTERM)\nprint('survived')", "SIGTERM"),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\nprint('survived')", "SIGKILL"),
        ("import os\nos.abort()", "SIGABRT"),
    ],
)
def test_a_signal_the_code_sends_itself_ends_it(code, name):
    error = _error_of(TOOL, code)
    assert f"({name})" in error and "survived" not in error


@linux_only
def test_a_sigkill_the_code_sends_itself_is_not_blamed_on_the_limits_alone():
    """The caller sees a SIGKILL the code sent itself as it sees the CPU limit's hard kill (or a memory kill that no
    cgroup counted): the message names every cause it may be, not the limits alone."""
    error = _error_of(TOOL, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
    assert "Process killed by the CPU or memory limit, or by the code itself (SIGKILL)." in error


@linux_only
@pytest.mark.parametrize("isolate", [True, False])
def test_code_that_stops_itself_is_reported_as_stopped_at_once(isolate):
    # A stopped process never ends on its own: waiting for it would hold the call until its time limit, then
    # blame the code's running time.
    tool = PythonTool(timeout=30.0, isolate=isolate)
    start = time.monotonic()
    error = _error_of(tool, "import os, signal\nprint('before')\nos.kill(os.getpid(), signal.SIGSTOP)\nprint('after')")
    assert time.monotonic() - start < 10
    assert error.startswith("before\nProcess stopped (SIGSTOP)") and "after" not in error and "TimeoutError" not in error
    assert _live_sandboxes() == 0
    assert tool.run("1 + 1") == "2\n"


@linux_only
def test_code_that_exits_normally_still_returns_its_output_and_status():
    assert TOOL.run("import os\nprint('bye')\nos._exit(0)") == "bye\n"
    assert _error_of(TOOL, "import sys\nsys.exit(143)") == "Process exited with status 143."


@linux_only
def test_network_is_unreachable():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(0.5)
        port = listener.getsockname()[1]
        code = (
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('connected')"
        )
        error = _error_of(TOOL, code)
        assert "connected" not in error.replace("connect(", "")
        assert "Network is unreachable" in error or "network access is disabled" in error
        with pytest.raises(TimeoutError):
            listener.accept()


@linux_only
def test_writes_outside_the_workdir_do_not_land(tmp_path):
    tmp_path.chmod(0o777)  # writable by anyone: only the sandbox itself can stop the write
    targets = [
        tmp_path / "escaped.txt",
        "/root/rapo-sandbox-escape.txt",
        f"/tmp/rapo-escape-{os.getpid()}.txt",
    ]
    for target in targets:
        code = f"open({str(target)!r}, 'w').write('x')"
        if str(target).startswith("/tmp/rapo-escape") and TOOL.isolation()["namespaces"]:
            TOOL.run(code)  # /tmp is the call's own private tmpfs: the write lands there, not on the host
        else:
            error = _error_of(TOOL, code)
            # Read-only where the host's folders are visible; absent in the minimal view.
            assert any(reason in error for reason in ("Read-only file system", "Permission denied", "No such file"))
        assert not os.path.exists(target)


@linux_only
def test_multiprocessing_runs_in_the_sandbox():
    # Its locks and semaphores live in /dev/shm, which the sandbox's filesystem view must provide.
    assert TOOL.run("import multiprocessing\nmultiprocessing.Lock()\n'locked'") == "'locked'\n"
    code = "import multiprocessing\nwith multiprocessing.Pool(2) as pool:\n    print(pool.map(abs, [-1, -2, -3]))"
    assert TOOL.run(code) == "[1, 2, 3]\n"


@linux_only
def test_the_code_gets_a_private_bounded_dev_shm():
    tool = PythonTool(timeout=10.0, max_disk_mb=4)
    if not tool.isolation()["filesystem"].startswith(("read-only", "minimal")):
        pytest.skip("no mount namespace here: /dev/shm is the host's")
    name = f"rapo-shm-{os.getpid()}"
    assert tool.run(f"open('/dev/shm/{name}', 'w').write('x')") == "1\n"
    assert not os.path.exists(f"/dev/shm/{name}")  # the call's own tmpfs, gone with its namespace
    assert "No space left on device" in _error_of(tool, "open('/dev/shm/big', 'wb').write(bytes(8 * 1024 * 1024))")


@linux_only
def test_disk_use_is_bounded():
    tool = PythonTool(timeout=10.0, max_disk_mb=4)
    if not tool.isolation()["filesystem"].startswith(("read-only", "minimal")):
        pytest.skip("no mount namespace here: the working dir is a plain folder")
    code = "for i in range(64):\n    open(f'f{i}', 'wb').write(bytes(1024 * 1024))"
    assert "No space left on device" in _error_of(tool, code)


@linux_only
def test_nothing_of_a_call_is_left_on_the_host():
    before = set(os.listdir(tempfile.gettempdir()))
    workdir = TOOL.run("import os\nopen('left.txt', 'w').write('x')\nos.getcwd()").strip().strip("'")
    if TOOL.isolation()["namespaces"]:
        assert workdir == "/tmp"  # a private tmpfs, gone with the call's namespace
    else:
        assert not os.path.exists(workdir)
    mine = f"rapo-python-{os.getpid()}-"  # other programs on this host may be running sandboxes too
    assert not [name for name in set(os.listdir(tempfile.gettempdir())) - before if name.startswith(mine)]


@linux_only
def test_isolation_report():
    report = TOOL.isolation()
    assert report["network"] in ("namespace", "socket-patch") and report["no_new_privs"] is True
    if report["namespaces"]:
        assert report["network"] == "namespace" and report["filesystem"].startswith(("read-only", "minimal"))
    if os.geteuid() == 0 and report["namespaces"]:
        assert report["uid"] != 0


@linux_only
def test_without_isolation_code_still_runs_and_sockets_are_blocked():
    tool = PythonTool(timeout=5.0, isolate=False)
    assert tool.isolation()["network"] == "socket-patch"
    assert tool.run("sum(range(5))") == "10\n"
    assert "network access is disabled" in _error_of(tool, "import socket\nsocket.socket()")


def test_thread_left_running_does_not_hold_the_call():
    start = time.monotonic()
    code = "import threading, time\nthreading.Thread(target=time.sleep, args=(30,)).start()\n'done'"
    assert TOOL.run(code) == "'done'\n"
    assert time.monotonic() - start < 4


def test_many_threads_do_not_share_state():
    outputs = []
    lock = threading.Lock()

    def call(i):
        result = TOOL.run(
            f"open('mine.txt', 'w').write('{i}')\nimport time\ntime.sleep(0.2)\nopen('mine.txt').read()"
        )
        with lock:
            outputs.append((i, result))

    threads = [threading.Thread(target=call, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outputs) == [(i, f"'{i}'\n") for i in range(6)]


def test_missing_interpreter_is_refused_up_front():
    with pytest.raises(ValueError, match="not found"):
        PythonTool(python="/nonexistent/python3")
