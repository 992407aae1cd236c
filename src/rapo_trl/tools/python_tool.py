"""``PythonTool``: the policy's ``<python>`` calls, each run in a fresh sandboxed subprocess.

Every call starts its own interpreter (``python -I``) with a scrubbed environment; the model's code,
stdout and stderr travel in unlinked files, so nothing of a call is left on disk and no other call can
find them by name. Inside, before the code runs, ``_sandbox_child`` applies every layer the OS allows
and reports which (``isolation()``):

- **Network**: a new network namespace (no interfaces up, so even 127.0.0.1 is unreachable; abstract
  UNIX sockets belong to it too). Where namespaces are refused, ``socket`` is patched instead: a
  best-effort block that code could bypass.
- **Filesystem** (``"minimal"``): in a new mount namespace the code is chrooted into a view holding
  only ``/usr`` (and the ``/bin``, ``/lib*`` links or folders), the interpreter's prefixes (its stdlib
  and site-packages, e.g. the virtualenv; at their real paths and, where a symlink leads there such as
  a ``.venv`` linking elsewhere, at the paths the interpreter names them by), a few files of ``/etc`` (``passwd``, ``group``, ``hosts``,
  ``ld.so.*``, ``ssl``, ``localtime``...), ``/dev/{null,zero,full,random,urandom}``, its own
  ``/proc``, a private size-limited tmpfs ``/tmp`` that is its working dir and ``HOME``, and another on
  ``/dev/shm`` (``multiprocessing``'s locks need it); all but these two read-only. The project's
  sources, datasets, home folders, caches, other calls' files and host UNIX sockets (``/tmp``, ``/run``)
  are not in it. Where the view cannot be built, the fallback is the host's mounts read-only with
  private tmpfs on ``/tmp`` and ``/dev/shm`` (``"read-only"``): host files stay readable then.
- **Processes**: a new pid namespace whose pid 1, a small init, runs the code as its child: the code sees
  only its own processes, dies of the signals it sends itself (which pid 1 would ignore), and when it ends
  the init exits, so the kernel kills and reaps everything it started, even what left its process group.
  Every sandbox process dies with the caller (``PR_SET_PDEATHSIG``), a SIGKILLed trainer included;
  the bootstrap then ends the namespace and removes the call's cgroup.
- **User**: as root, each call runs under its own unused uid (see ``sandbox_users``), so
  ``RLIMIT_NPROC`` caps its processes and cleanup kills exactly its processes. As a normal user the code
  keeps the user's uid, inside a user namespace when the kernel allows one; its capabilities are dropped
  and ``no_new_privs`` is set either way.
- **Limits**: ``RLIMIT_AS`` (memory per process), ``RLIMIT_CPU``, ``RLIMIT_NPROC``, ``RLIMIT_FSIZE``
  (files and the captured output), no core dumps; where this process may create a memory cgroup
  (``sandbox_cgroup``), one per call caps all its processes together at ``memory_mb``
  (``"memory": "cgroup"``); a wall-clock timeout kills the whole process group, which ends the pid
  namespace (and, with a dedicated uid, every process of that uid is killed as well).

On this project's machines (root, Linux 6.x, cgroup v1 memory controller) all layers are active. As a
normal user with unprivileged user namespaces (most laptops) the network, minimal filesystem and pid
layers hold, memory is per process. In a container without ``CAP_SYS_ADMIN`` (e.g. Docker defaults)
only the limits, the socket patch and the uid drop (when the interpreter is readable by others)
remain; the code then runs in a host folder of its own (``rapo-python-<caller pid>-*``, mode 0700,
removed after the call, or by the next ``PythonTool`` process if the caller was killed), sees the
host's files, and processes it starts in the background may outlive a killed caller. Linux only:
elsewhere (macOS) only the timeout, the output cap and the rlimits the OS accepts hold.

Not covered: what the minimal view shows is readable (the installed packages, ``/usr``); a kernel
exploit escapes any of this. Use a container or VM for untrusted users rather than a policy model
being trained.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from .base import ToolError
from .sandbox_cgroup import CallCgroup, _pid_alive, sweep_stale
from .sandbox_users import kill_all_of, shared_pool

_CHILD = str(Path(__file__).with_name("_sandbox_child.py"))
_FENCED = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\r?\n(.*?)(?:\r?\n[ \t]*```|\Z)", re.S | re.I)
# What the code sees of the environment: nothing inherited (no tokens, no proxies, no PYTHONPATH).
_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "MPLBACKEND": "Agg",
}
_SETUP_FAILED = 70


def strip_code_fences(text: str) -> str:
    """The code inside markdown fences (```python ... ```) if there are any, else ``text``; dedented.

    Code that runs as written is kept whole: a fence inside one of its strings (code writing markdown) is
    no fence around it."""
    if "```" in text and not _parses(textwrap.dedent(text)):
        blocks = _FENCED.findall(text)
        if blocks:
            text = "\n".join(blocks)
    return textwrap.dedent(text).strip("\n")


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # ValueError: a null byte
        return False
    return True


@dataclass
class PythonTool:
    """Runs the content of ``<python>...</python>`` in a sandboxed subprocess and returns its output.

    Success returns stdout (capped). A syntax error, an exception, a non-zero exit, a timeout, a
    resource limit or the code stopping itself (``SIGSTOP``) raises ``ToolError`` with the partial output
    and the tail of stderr, so the model sees what went wrong and the call counts as a failure. Safe to
    call from many threads at once.

    stderr, the warnings Python prints included, reaches the model only with a failure: a successful
    call's result is what the code printed to stdout and nothing else, as in the scripted expert's
    traces (``tasks.trajectory.run_python_locally`` keeps stdout alone), whose answer is the last line printed.
    """

    tag: ClassVar[str] = "python"

    timeout: float = 10.0
    """Wall-clock seconds per call; past it the whole process tree is killed."""
    memory_mb: int = 1024
    """Memory in MiB: the address-space limit of each process (RLIMIT_AS; a larger allocation raises
    MemoryError in the code) and, with ``call_memory_cap`` where cgroups allow, of the whole call."""
    cpu_seconds: float | None = None
    """CPU-time limit (RLIMIT_CPU); ``None`` uses ``timeout``."""
    max_output_chars: int = 4000
    """Characters of stdout (or of the error text) returned to the model; the rest is cut with a note."""
    python: str = field(default_factory=lambda: sys.executable)
    """Interpreter that runs the code (its installed packages are importable)."""
    max_processes: int = 8
    """Processes and threads the code may have at once (RLIMIT_NPROC); memory_mb applies to each."""
    max_file_mb: int = 16
    """Largest file the code may write, captured output included (RLIMIT_FSIZE)."""
    max_disk_mb: int = 64
    """Total size of the working dir, a tmpfs where mount namespaces are available (``/dev/shm`` gets as much)."""
    show_last_expression: bool = True
    """Print the repr of a final bare expression (unless ``None``), as a notebook cell does."""
    isolate: bool = True
    """Use namespaces and a dedicated uid where the OS allows; ``False`` keeps the limits, the timeout,
    the capability drop and the socket patch."""
    call_memory_cap: bool = True
    """Also cap the call as a whole at ``memory_mb`` (all its processes together) with a memory
    cgroup, where this process may create one (see ``sandbox_cgroup``); needs ``isolate``."""

    def __post_init__(self):
        if os.name != "posix":
            raise RuntimeError("PythonTool needs a POSIX system (Linux for the sandbox layers).")
        # A wrong interpreter would fail every call during training: refuse it up front instead.
        if shutil.which(self.python) is None:
            raise ValueError(f"PythonTool: interpreter {self.python!r} not found or not executable.")

    def run(self, text: str) -> str:
        code = strip_code_fences(text)
        if not code.strip():
            raise ToolError("No code to run: put Python code between <python> and </python>.")
        result = self._execute(code)
        if result["ok"]:
            return result["stdout"]
        raise ToolError(result["error"])

    def isolation(self) -> dict:
        """Which sandbox layers are active here (runs one trivial call)."""
        return self._execute("pass")["isolation"]

    def _execute(self, code: str) -> dict:
        _sweep_once()
        # As root each call gets a uid of its own; otherwise the code keeps the user's uid.
        use_uid = self.isolate and os.geteuid() == 0
        with shared_pool().lease() if use_uid else nullcontext() as uid:
            cgroup = CallCgroup.create(self.memory_mb) if self.isolate and self.call_memory_cap else None
            try:
                return self._execute_with(code, uid, cgroup)
            finally:
                if cgroup is not None:
                    cgroup.remove()

    def _execute_with(self, code: str, uid: int | None, cgroup: CallCgroup | None) -> dict:
        # Code, stdout and stderr live in unlinked files: whatever happens to this process (even
        # SIGKILL), nothing of the call stays on disk, and no other call can find them by name.
        with tempfile.TemporaryFile() as code_file, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            code_file.write(code.encode("utf-8"))
            code_file.seek(0)
            report_read, report_write = os.pipe()
            config = {
                "code_fd": code_file.fileno(),
                "report_fd": report_write,
                "parent_pid": os.getpid(),
                "cgroup_procs": cgroup.procs_file if cgroup is not None else None,
                "uid": uid,
                "namespaces": self.isolate,
                "memory_mb": self.memory_mb,
                "cpu_seconds": self.cpu_seconds if self.cpu_seconds is not None else self.timeout,
                "max_processes": self.max_processes,
                "max_file_mb": self.max_file_mb,
                "max_disk_mb": self.max_disk_mb,
                "show_last_expression": self.show_last_expression,
            }
            command = [self.python, "-I", "-B", "-X", "utf8", _CHILD, json.dumps(config)]
            start = time.monotonic()
            timed_out, stop_signal = False, None
            try:
                process = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    cwd="/",
                    env={**_ENV, "HOME": "/tmp", "TMPDIR": "/tmp"},  # the child points them at its work dir
                    pass_fds=(report_write, code_file.fileno()),
                    start_new_session=True,
                )
            except OSError as error:  # e.g. EAGAIN at the process limit: a failed call, and no descriptor kept
                os.close(report_read)
                raise ToolError(f"The sandbox could not start a process ({type(error).__name__}: {error}); the "
                                "machine may be at its process or memory limit.") from error
            finally:
                os.close(report_write)
            try:
                stop_signal = _wait_for_end_or_stop(process, self.timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                self._kill_tree(process, uid)
            returncode = process.returncode
            with os.fdopen(report_read, "rb") as report_file:
                report_text = report_file.read().decode("utf-8", "replace")
            stdout, stdout_cut = _read_capped(out, self.max_output_chars, tail=False)
            stderr, _ = _read_capped(err, self.max_output_chars, tail=True)
        isolation = json.loads(report_text) if report_text.startswith("{") else {}
        _remove_workdir(isolation.get("workdir"))
        seconds = time.monotonic() - start
        if stdout_cut:  # on a failure too: the error text leads with this output
            stdout += f"\n... [output truncated: showing the first {self.max_output_chars} characters]"
        if returncode == 0 and not timed_out and stop_signal is None:
            return {"ok": True, "stdout": stdout, "isolation": isolation, "seconds": seconds}
        oom = cgroup is not None and cgroup.oom_killed()
        error = self._describe_failure(returncode, timed_out, stdout, stderr, isolation, oom, stop_signal)
        return {"ok": False, "error": error, "isolation": isolation, "seconds": seconds}

    def _kill_tree(self, process: subprocess.Popen, uid: int | None) -> None:
        """Kill the call's process group (also after a normal exit: background children die too)."""
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except OSError:
            pass
        process.wait()
        if uid is not None:
            kill_all_of(uid)

    def _describe_failure(self, returncode, timed_out, stdout, stderr, isolation, oom=False, stop_signal=None) -> str:
        parts = []
        if stop_signal is not None:
            name = signal.Signals(stop_signal).name if stop_signal in signal.valid_signals() else stop_signal
            parts.append(f"Process stopped ({name}); the call was ended rather than left waiting for its "
                         f"{self.timeout:g} s time limit.")
        elif timed_out:
            parts.append(f"TimeoutError: the code ran longer than the {self.timeout:g} s time limit.")
        elif oom:
            parts.append(f"MemoryError: the call used more than its {self.memory_mb} MB of memory and was killed.")
        elif returncode == _SETUP_FAILED and "setup_error" in isolation:
            parts.append(f"Sandbox setup failed: {isolation['setup_error']}")
        elif returncode < 0:
            name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else -returncode
            reason = {
                "SIGXCPU": f"CPU time limit of {self.cpu_seconds or self.timeout:g} s exceeded",
                # The CPU limit's hard kill, a memory kill no cgroup counted and the code's own os.kill reach the
                # caller as the same bare SIGKILL: name each rather than blame the limits for the code's own.
                "SIGKILL": "killed by the CPU or memory limit, or by the code itself",
                "SIGXFSZ": f"file size limit of {self.max_file_mb} MB exceeded",
            }.get(str(name), "terminated by a signal")
            parts.append(f"Process {reason} ({name}).")
        if "File too large" in stderr:
            parts.append(f"Output or file exceeded the {self.max_file_mb} MB limit.")
        if stderr.strip():
            parts.append(stderr.rstrip())
        if not parts:  # a bare exit status (sys.exit(3)): without it the output alone would read as the error
            parts.append(f"Process exited with status {returncode}.")
        return "\n".join(([stdout.rstrip()] if stdout.strip() else []) + parts)


def _wait_for_end_or_stop(process: subprocess.Popen, timeout: float) -> int | None:
    """Wait up to ``timeout`` seconds for ``process`` to end or stop; the signal that stopped it, if one did.

    A stopped process never ends on its own: ``Popen.wait`` would wait for it until the time limit. The sandbox
    bootstrap stops itself when the code stops (``_sandbox_child``). Polls as ``Popen.wait`` does with a timeout,
    leaving the process to it to reap. Raises ``subprocess.TimeoutExpired`` past ``timeout``.
    """
    if not hasattr(os, "waitid"):  # macOS: a stop is seen when the time limit ends it
        process.wait(timeout=timeout)
        return None
    deadline = time.monotonic() + timeout
    delay = 0.0005
    flags = os.WEXITED | os.WSTOPPED | os.WNOHANG | os.WNOWAIT
    while (state := os.waitid(os.P_PID, process.pid, flags)) is None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise subprocess.TimeoutExpired(process.args, timeout)
        time.sleep(min(delay, remaining))
        delay = min(delay * 2, 0.05)
    return state.si_status if state.si_code == os.CLD_STOPPED else None


_SWEPT = False
_SWEEP_LOCK = threading.Lock()


def _sweep_once() -> None:
    """Once per process: remove work dirs and cgroups of calls whose caller died mid-call."""
    global _SWEPT
    with _SWEEP_LOCK:
        if _SWEPT:
            return
        _SWEPT = True
    root = Path(tempfile.gettempdir())
    for folder in root.glob("rapo-python-*-*"):
        if not _pid_alive(folder.name):
            shutil.rmtree(folder, ignore_errors=True)
    sweep_stale()


def _remove_workdir(path: str | None) -> None:
    """Remove a work dir the child made on the host (only when namespaces were unavailable)."""
    if not path:
        return
    folder = Path(path)
    if folder.parent == Path(tempfile.gettempdir()) and folder.name.startswith(f"rapo-python-{os.getpid()}-"):
        shutil.rmtree(folder, ignore_errors=True)


def _read_capped(handle, max_chars: int, tail: bool) -> tuple[str, bool]:
    """At most ``max_chars`` characters from the head (or tail) of a captured output file, and whether
    anything was cut."""
    size = handle.seek(0, os.SEEK_END)
    budget = max_chars * 4 + 4  # utf-8 is at most 4 bytes per character
    handle.seek(max(0, size - budget) if tail else 0)
    text = handle.read(budget).decode("utf-8", "replace")
    truncated = size > budget or len(text) > max_chars
    if len(text) > max_chars:
        text = text[-max_chars:] if tail else text[:max_chars]
    if truncated and tail:
        text = "... " + text
    return text, truncated
