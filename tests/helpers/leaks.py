"""What a process holds that a sandbox call could leak: live descendant processes, open file descriptors, and
entries in the temp folder (point ``tempfile.tempdir`` at a fresh folder first, so that other programs' files do not
count). Counted before and after a fault to show nothing stayed."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rapo_trl.tools.sandbox_cgroup import _own_memory_cgroup


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie or a dead process does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[-1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


def descendants(root: int | None = None) -> list[int]:
    """Live (non-zombie) processes descending from ``root`` (default: this process)."""
    root = os.getpid() if root is None else root
    parents = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[-1].split()
        except OSError:
            continue
        if fields[0] not in (b"Z", b"X"):
            parents[int(entry)] = int(fields[1])
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    return found


def sandbox_cgroups() -> int:
    """Per-call memory cgroups of this process's sandbox calls (0 where none can be made); named by the caller's pid,
    so another process's calls beside it do not count."""
    own = _own_memory_cgroup()
    return 0 if own is None else len(list(Path(own[0]).glob(f"rapo-python-{os.getpid()}-*")))


@dataclass(frozen=True)
class Footprint:
    processes: int
    fds: int
    temp_entries: int
    cgroups: int

    @classmethod
    def now(cls) -> Footprint:
        return cls(len(descendants()), len(os.listdir("/proc/self/fd")), len(list(Path(tempfile.gettempdir()).iterdir())),
                   sandbox_cgroups())
