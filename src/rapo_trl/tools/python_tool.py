"""``PythonTool``: the policy's ``<python>`` calls, each run in a fresh sandboxed subprocess.

Every call starts its own interpreter (``python -I``) in a new temp working directory that is removed
afterwards, with a scrubbed environment and the model's code passed through a file. Inside, before the
code runs, ``_sandbox_child`` applies every layer the OS allows and reports which (``isolation()``):

- **Network**: a new network namespace (no interfaces up, so even 127.0.0.1 is unreachable). Where
  namespaces are refused, ``socket`` is patched instead: a best-effort block that code could bypass.
- **Filesystem**: in a new mount namespace the working dir becomes a size-limited tmpfs and every other
  mount is remounted read-only, so writes outside it fail with EROFS whatever the uid, and the disk
  cannot be filled. Directories an unprivileged uid cannot traverse on the way to the interpreter
  (``/root`` holding pyenv) are covered by a tmpfs that brings back only the interpreter's folder,
  which also hides the credentials and caches kept there.
- **Processes**: a new pid namespace in which the code runs as pid 1: it sees only its own processes,
  and when it ends the kernel kills and reaps everything it started, even what left its process group.
- **User**: as root, each call runs under its own unused uid (see ``sandbox_users``), so
  ``RLIMIT_NPROC`` caps its processes and cleanup kills exactly its processes. As a normal user the code
  keeps the user's uid, inside a user namespace when the kernel allows one; its capabilities are dropped
  and ``no_new_privs`` is set either way.
- **Limits**: ``RLIMIT_AS`` (memory), ``RLIMIT_CPU``, ``RLIMIT_NPROC``, ``RLIMIT_FSIZE`` (files and the
  captured output), no core dumps; a wall-clock timeout kills the whole process group, which ends the
  pid namespace (and, with a dedicated uid, every process of that uid is killed as well).

On this project's machines (root, Linux 6.x) all layers are active. In a container without
``CAP_SYS_ADMIN`` (e.g. Docker defaults) only the limits, the socket patch and the uid drop (when the
interpreter is readable by others) remain; on a laptop as a normal user an unprivileged user namespace
(where the kernel allows one) provides the network, filesystem and pid layers. Linux only: elsewhere
(macOS) only the timeout, the output cap and the rlimits the OS accepts hold.

Not covered: the code can read world-readable files of the host; memory is limited per process (at
most ``max_processes`` x ``memory_mb`` per call), not per call as a cgroup would; use a container or VM
for untrusted users rather than a policy model being trained.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from .base import ToolError
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
    """The code inside markdown fences (```python ... ```) if there are any, else ``text``; dedented."""
    if "```" in text:
        blocks = _FENCED.findall(text)
        if blocks:
            text = "\n".join(blocks)
    return textwrap.dedent(text).strip("\n")


@dataclass
class PythonTool:
    """Runs the content of ``<python>...</python>`` in a sandboxed subprocess and returns its output.

    Success returns stdout (capped). A syntax error, an exception, a non-zero exit, a timeout or a
    resource limit raises ``ToolError`` with the partial output and the tail of stderr, so the model
    sees what went wrong and the call counts as a failure. Safe to call from many threads at once.
    """

    tag: ClassVar[str] = "python"

    timeout: float = 10.0
    """Wall-clock seconds per call; past it the whole process tree is killed."""
    memory_mb: int = 1024
    """Address-space limit (RLIMIT_AS) in MiB; a larger allocation raises MemoryError in the code."""
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
    """Total size of the working dir, a tmpfs where mount namespaces are available."""
    show_last_expression: bool = True
    """Print the repr of a final bare expression (unless ``None``), as a notebook cell does."""
    isolate: bool = True
    """Use namespaces and a dedicated uid where the OS allows; ``False`` keeps the limits, the timeout,
    the capability drop and the socket patch."""

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
        # As root each call gets a uid of its own; otherwise the code keeps the user's uid.
        use_uid = self.isolate and os.geteuid() == 0
        with shared_pool().lease() if use_uid else nullcontext() as uid:
            run_dir = tempfile.mkdtemp(prefix="rapo-python-")
            try:
                return self._execute_in(Path(run_dir), code, uid)
            finally:
                shutil.rmtree(run_dir, ignore_errors=True)

    def _execute_in(self, run_dir: Path, code: str, uid: int | None) -> dict:
        # run_dir stays root-only except traversal; only work/ belongs to the sandbox uid.
        os.chmod(run_dir, 0o711)
        work = run_dir / "work"
        work.mkdir(mode=0o700)
        if uid is not None:
            os.chown(work, uid, uid)
        code_path = run_dir / "code.py"
        code_path.write_text(code, encoding="utf-8")
        report_read, report_write = os.pipe()
        config = {
            "code_path": str(code_path),
            "report_fd": report_write,
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
        env = {**_ENV, "HOME": str(work), "TMPDIR": str(work)}
        start = time.monotonic()
        timed_out = False
        with open(run_dir / "stdout", "w+b") as out, open(run_dir / "stderr", "w+b") as err:
            try:
                process = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    cwd=work,
                    env=env,
                    pass_fds=(report_write,),
                    start_new_session=True,
                )
            finally:
                os.close(report_write)
            try:
                returncode = process.wait(timeout=self.timeout)
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
        seconds = time.monotonic() - start
        if returncode == 0 and not timed_out:
            if stdout_cut:
                stdout += f"\n... [output truncated: showing the first {self.max_output_chars} characters]"
            return {"ok": True, "stdout": stdout, "isolation": isolation, "seconds": seconds}
        error = self._describe_failure(returncode, timed_out, stdout, stderr, isolation)
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

    def _describe_failure(self, returncode, timed_out, stdout, stderr, isolation) -> str:
        parts = [stdout.rstrip()] if stdout.strip() else []
        if timed_out:
            parts.append(f"TimeoutError: the code ran longer than the {self.timeout:g} s time limit.")
        elif returncode == _SETUP_FAILED and "setup_error" in isolation:
            parts.append(f"Sandbox setup failed: {isolation['setup_error']}")
        elif returncode < 0:
            name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else -returncode
            reason = {
                "SIGXCPU": f"CPU time limit of {self.cpu_seconds or self.timeout:g} s exceeded",
                "SIGKILL": "killed (CPU or memory limit)",
                "SIGXFSZ": f"file size limit of {self.max_file_mb} MB exceeded",
            }.get(str(name), "terminated by a signal")
            parts.append(f"Process {reason} ({name}).")
        if "File too large" in stderr:
            parts.append(f"Output or file exceeded the {self.max_file_mb} MB limit.")
        if stderr.strip():
            parts.append(stderr.rstrip())
        if not parts:
            parts.append(f"Process exited with status {returncode}.")
        return "\n".join(parts)


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
