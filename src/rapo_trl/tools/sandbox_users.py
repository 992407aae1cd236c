"""Dedicated unprivileged uids for sandboxed processes, and killing everything that runs under one.

When the trainer runs as root, each concurrent ``PythonTool`` call leases its own uid from a range no
account uses. A uid of its own makes ``RLIMIT_NPROC`` a per-call process cap (root ignores it), keeps
one call's code from signalling another's, and makes cleanup exact: every process with that uid
belongs to the call, so a fork bomb is ended with one ``kill(-1, SIGKILL)`` issued as that uid, which
the kernel applies atomically against new forks.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

# High and partitioned by pid so two trainers on one host rarely share a range; below 2**31 for tools
# that treat uids as signed.
_BASE_UID = 2_100_000_000
_SLOTS = 256


def processes_of(uid: int) -> list[int]:
    """Live (non-zombie) pids owned by ``uid``, from /proc; empty where /proc is absent."""
    pids = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return pids
    for entry in entries:
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid and not _is_zombie(entry):
                    pids.append(int(entry))
            except OSError:
                continue
    return pids


def _is_zombie(pid: str) -> bool:
    # Zombies run nothing and cannot be killed; init reaps them. State follows the last ")" in stat.
    with open(f"/proc/{pid}/stat", "rb") as handle:
        return handle.read().rsplit(b")", 1)[-1].split()[0] in (b"Z", b"X")


def kill_all_of(uid: int, attempts: int = 50) -> bool:
    """SIGKILL every process of ``uid``; True once none is left. Only for dedicated sandbox uids."""
    killer = shutil.which("kill", path="/usr/bin:/bin")
    for _ in range(attempts):
        pids = processes_of(uid)
        if not pids:
            return True
        if killer:
            # kill(-1) as that uid reaches exactly its processes and blocks forks while it runs.
            subprocess.run(
                [killer, "-KILL", "-1"],
                user=uid,
                group=uid,
                extra_groups=[],
                env={},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=False,
            )
        else:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        time.sleep(0.01)
    return not processes_of(uid)


class UidPool:
    """Thread-safe lease of uids that no account on this host uses."""

    def __init__(self, base: int | None = None, size: int = _SLOTS):
        base = _BASE_UID + (os.getpid() % 8192) * size if base is None else base
        # FIFO: a returned uid rests behind the others, giving init time to reap its zombies (they still
        # count against RLIMIT_NPROC until reaped).
        self._free = deque(uid for uid in range(base, base + size) if not _is_account(uid))
        self._lock = threading.Condition()

    @contextmanager
    def lease(self) -> Iterator[int]:
        with self._lock:
            while not self._free:
                self._lock.wait()
            uid = self._free.popleft()
        try:
            kill_all_of(uid)  # leftovers of a crashed earlier owner of this uid
            yield uid
        finally:
            kill_all_of(uid)
            with self._lock:
                self._free.append(uid)
                self._lock.notify()


def _is_account(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


_POOL: UidPool | None = None
_POOL_LOCK = threading.Lock()


def shared_pool() -> UidPool:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = UidPool()
        return _POOL
