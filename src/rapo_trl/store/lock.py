"""An inter-process lock on an embedded store's folder.

Embedded Chroma is single-process: each process keeps its own in-memory index and write log, so two
processes writing one folder corrupt it silently, and a process reading while another writes sees a
half-written state. A ``flock`` on ``<store>/rapo-store.lock`` makes that impossible:

- a process with the store open holds a *shared* lock (any number of readers at once);
- a process that writes (or creates the store) holds an *exclusive* lock, which it keeps until the
  store is closed or the process ends (the kernel drops it then, even after SIGKILL).

A process that cannot get the lock it needs gets a :class:`StoreLockedError` naming the holder; the
fix for real sharing is a Chroma server (``chroma run --path DIR``) and ``TraceStore.connect``.
Within one process, every ``TraceStore`` on a folder shares one lock (Chroma shares one client per
folder too), so opening a store twice in a process never conflicts with itself.
"""

from __future__ import annotations

import fcntl
import os
import sys
import threading
from pathlib import Path

from rapo_trl.store.errors import StoreLockedError

LOCK_FILE = "rapo-store.lock"
_SHARED, _EXCLUSIVE = 1, 2


class _FolderLock:
    """The lock this process holds on one store folder, shared by all its stores there."""

    def __init__(self, folder: str):
        self.folder = folder
        self.path = os.path.join(folder, LOCK_FILE)
        self.fd: int | None = None
        self.level = 0
        self.holders: dict[int, int] = {}  # id(owner) -> level it needs
        self.write_lock = threading.RLock()  # one writer thread at a time within the process

    def need(self, owner: object, level: int) -> None:
        if level > self.level:
            self._take(level)
        self.holders[id(owner)] = max(level, self.holders.get(id(owner), 0))

    def drop(self, owner: object) -> None:
        self.holders.pop(id(owner), None)
        if not self.holders and self.fd is not None:
            os.close(self.fd)  # closing the descriptor releases the flock
            self.fd, self.level = None, 0

    def _take(self, level: int) -> None:
        if self.fd is None:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        operation = fcntl.LOCK_EX if level == _EXCLUSIVE else fcntl.LOCK_SH
        try:
            fcntl.flock(self.fd, operation | fcntl.LOCK_NB)
        except BlockingIOError:
            # A failed conversion drops the lock held before: take the shared one back if we had it.
            if self.level == _SHARED:
                try:
                    fcntl.flock(self.fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:
                    self.level = 0
            raise StoreLockedError(_locked_message(self.folder, self.path, level)) from None
        self.level = level
        if level == _EXCLUSIVE:  # name ourselves for the next process that finds the store locked
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, _describe(os.getpid()).encode("utf-8", "replace"), 0)


_LOCKS: dict[str, _FolderLock] = {}
_REGISTRY = threading.Lock()


def _folder_lock(folder: str | os.PathLike) -> _FolderLock:
    key = os.path.realpath(folder)
    with _REGISTRY:
        if key not in _LOCKS:
            _LOCKS[key] = _FolderLock(key)
        return _LOCKS[key]


def hold(folder, owner: object, exclusive: bool) -> threading.RLock:
    """Make ``owner`` hold a shared (or exclusive) lock on ``folder``; returns the process's writer
    lock for that folder. Raises :class:`StoreLockedError` when another process prevents it."""
    lock = _folder_lock(folder)
    with _REGISTRY:
        lock.need(owner, _EXCLUSIVE if exclusive else _SHARED)
    return lock.write_lock


def release(folder, owner: object) -> None:
    """``owner`` no longer uses ``folder``; the flock goes when no store of this process uses it."""
    lock = _folder_lock(folder)
    with _REGISTRY:
        lock.drop(owner)


def holds_exclusive(folder) -> bool:
    return _folder_lock(folder).level == _EXCLUSIVE


def _locked_message(folder: str, lock_path: str, wanted: int) -> str:
    holders = _holders(lock_path)
    if holders:
        named = "; ".join(
            f"pid {pid} ({_command(pid)}; {'writing' if kind == 'WRITE' else 'reading'})" for pid, kind in holders
        )
    else:  # no /proc/locks (not Linux, or another pid namespace): the last writer's self-description
        try:
            named = Path(lock_path).read_text(encoding="utf-8", errors="replace").strip() or "another process"
        except OSError:
            named = "another process"
    action = "write to" if wanted == _EXCLUSIVE else "open"
    return (
        f"Cannot {action} the trace store at {folder}: it is in use by {named}. An embedded store is "
        "single-process; wait for that process to end, or serve the folder with `chroma run --path "
        f"{folder}` and open it in every process with TraceStore.connect(host, port)."
    )


def _holders(lock_path: str) -> list[tuple[int, str]]:
    """``(pid, "READ"|"WRITE")`` of the flocks on ``lock_path`` held by other processes (Linux)."""
    try:
        info = os.stat(lock_path)
        with open("/proc/locks") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return []
    device = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    found = []
    for line in lines:
        fields = line.split()
        if "->" in fields:  # a waiter, not a holder
            continue
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == device:
            pid = int(fields[4])
            if pid != os.getpid() and (pid, fields[3]) not in found:
                found.append((pid, fields[3]))
    return found


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            words = handle.read().split(b"\0")
    except OSError:
        return "command unknown"
    return _short(" ".join(word.decode("utf-8", "replace") for word in words if word)) or "command unknown"


def _short(command: str, limit: int = 120) -> str:
    """A command line on one line (``-c`` scripts hold newlines), cut to ``limit`` characters."""
    text = " ".join(command.split())
    return text[:limit] + ("..." if len(text) > limit else "")


def _describe(pid: int) -> str:
    return f"pid {pid} ({_short(' '.join(sys.argv)) or sys.executable})"
