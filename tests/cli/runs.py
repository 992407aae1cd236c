"""Run ``rapo`` command lines as real subprocesses, several at once.

Each recipe command imports torch, transformers and TRL (seconds of CPU each), so the command lines
of ``tests/cli`` are declared in one table and started together: the build -> train -> eval chain
runs as soon as its inputs exist, and the independent runs (bad input, help) share a few slots
beside it. A test asks for a run by name and waits for its result.

Under pytest-xdist every worker holds the table, but each command line runs once for all of them: the worker that
reaches it first runs it under a file lock in the folder the workers share, and saves its result there; the others
wait on the lock and read it (``CliRuns(results=...)``).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

TIMEOUT_S = 600


def rapo_env() -> dict[str, str]:
    """The test environment (offline, set by tests/conftest.py), one torch thread per process."""
    env = dict(os.environ)
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        env[name] = "1"
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("WANDB_DISABLED", "true")
    env["OMP_NUM_THREADS"] = "1"
    env.pop("RAPO_TRACEBACK", None)
    return env


def rapo_argv(*args) -> list[str]:
    """``python -m rapo_trl.cli ARGS`` with this interpreter."""
    return [sys.executable, "-m", "rapo_trl.cli", *map(str, args)]


ON_ONE_CORE = ("import os, sys\n"
               "if hasattr(os, 'sched_setaffinity'):\n"
               "    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
               "from rapo_trl.cli import main\n"
               "sys.exit(main(sys.argv[1:]))")
"""``rapo`` on one core of those this process may use, where the system lets a process choose (Linux): every process
it starts inherits the core, so torch computes with one thread throughout."""


def rapo_argv_on_one_core(*args) -> list[str]:
    """`rapo_argv` on one core (`ON_ONE_CORE`); as long, so ``run.args[3:]`` are the arguments after ``rapo``."""
    return [sys.executable, "-c", ON_ONE_CORE, *map(str, args)]


def rapo(*args, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run one ``rapo`` command line and wait for it."""
    return subprocess.run(rapo_argv(*args), cwd=cwd, env=rapo_env(), capture_output=True, text=True,
                          timeout=TIMEOUT_S)


def describe(run: subprocess.CompletedProcess) -> str:
    """The command, exit code and output tails, for assertion messages."""
    return (f"$ {' '.join(run.args[3:])}\nexit {run.returncode}\n--- stdout\n{run.stdout[-3000:]}"
            f"\n--- stderr\n{run.stderr[-3000:]}")


@dataclass
class Run:
    """One command line of the table: its arguments and the run it needs first (``after``)."""

    args: tuple
    """Command-line arguments after ``rapo``; a callable one is called when the run starts."""
    after: str | None = None
    side: bool = True
    """Side runs share ``CliRuns.side_slots``; chain runs (``side=False``) start as soon as they can."""
    one_core: bool = False
    """Run on one core (`rapo_argv_on_one_core`)."""
    future: Future | None = field(default=None, repr=False)


class CliRuns:
    """Starts the runs ``wanted`` (and what they need first) at once; ``runs[name]`` waits for one
    (and starts it, if nobody wanted it up front). With ``results`` (a folder other processes' ``CliRuns`` of the same
    table share), a run another process has made or is making is read from there, not run again."""

    def __init__(self, table: dict[str, Run], cwd: Path, wanted=(), side_slots: int = 3, results: Path | None = None):
        self.table = table
        self.cwd = cwd
        self.results = results
        self._side = threading.Semaphore(side_slots)
        self._lock = threading.RLock()
        self._procs: list[subprocess.Popen] = []
        self._closed = False
        self._pool = ThreadPoolExecutor(max_workers=len(table), thread_name_prefix="rapo-cli")
        for name in table:  # table order: the chain first, so it is first in line
            if name in wanted:
                self._start(name)

    def _start(self, name: str) -> Future:
        with self._lock:
            run = self.table[name]
            if run.future is None:
                if run.after is not None:
                    self._start(run.after)
                run.future = self._pool.submit(self._execute, name, run)
            return run.future

    def __getitem__(self, name: str) -> subprocess.CompletedProcess:
        return self._start(name).result(timeout=3 * TIMEOUT_S)

    def _execute(self, name: str, run: Run) -> subprocess.CompletedProcess:
        if run.after is not None:
            needed = self[run.after]
            if needed.returncode != 0:
                raise RuntimeError(f"'{name}' needs '{run.after}', which failed:\n{describe(needed)}")
        if self.results is None:
            return self._in_slot(run)
        with self._run_lock(name):
            saved = self.results / f"{name}.json"
            if saved.is_file():
                return subprocess.CompletedProcess(**json.loads(saved.read_text()))
            done = self._in_slot(run)
            if not self._closed:  # a run this session's end stopped is no result: a process still needing it runs it
                saved.write_text(json.dumps({"args": list(map(str, done.args)), "returncode": done.returncode,
                                             "stdout": done.stdout, "stderr": done.stderr}))
            return done

    def _in_slot(self, run: Run) -> subprocess.CompletedProcess:
        if run.side:
            with self._side:
                return self._spawn(run)
        return self._spawn(run)

    @contextmanager
    def _run_lock(self, name: str):
        """The run's lock among the processes sharing ``results``, polled so that this session's end stops the wait
        (another process may hold it for the length of a run)."""
        with open(self.results / f"{name}.lock", "w") as handle:
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if self._closed:
                        raise RuntimeError("the test session ended while another process made this run") from None
                    time.sleep(0.2)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _spawn(self, run: Run) -> subprocess.CompletedProcess:
        args = (arg() if callable(arg) else arg for arg in run.args)
        argv = rapo_argv_on_one_core(*args) if run.one_core else rapo_argv(*args)
        with self._lock:
            if self._closed:
                raise RuntimeError("the test session ended before this run started")
            proc = subprocess.Popen(argv, cwd=self.cwd, env=rapo_env(), stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
            self._procs.append(proc)
        try:
            stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)

    def close(self) -> None:
        """Stop the runs this object started that are still going (a test run cut short)."""
        with self._lock:
            self._closed = True
            for proc in self._procs:
                if proc.poll() is None:
                    proc.kill()
        self._pool.shutdown(wait=True, cancel_futures=True)
