"""A memory cgroup per sandboxed call: one cap on the resident memory of all its processes together.

``RLIMIT_AS`` limits each process; a call that starts several could use ``max_processes`` times the
limit. Where this process may create a child of its own memory cgroup (cgroup v1 ``memory``, or v2
with the ``memory`` controller delegated), each call gets one, capped (swap included) at the call's
memory; its child joins it before running anything. Elsewhere (no cgroupfs, not permitted) calls
run without one and :meth:`PythonTool.isolation` reports ``"memory": "per-process"``.
"""

from __future__ import annotations

import itertools
import os
import signal
import time

_PREFIX = "rapo-python-"
_COUNTER = itertools.count()


def _own_memory_cgroup() -> tuple[str, int] | None:
    """``(folder, version)`` of this process's memory cgroup, where it can hold children."""
    try:
        with open("/proc/self/cgroup") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            folder = f"/sys/fs/cgroup/memory{path}"
            if os.path.isfile(os.path.join(folder, "memory.limit_in_bytes")):
                return folder, 1
    for line in lines:
        if line.startswith("0::"):
            for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
                folder = root + line[3:]
                try:
                    with open(os.path.join(folder, "cgroup.subtree_control")) as handle:
                        if "memory" in handle.read().split():
                            return folder, 2
                except OSError:
                    continue
    return None


class CallCgroup:
    """One call's cgroup; ``procs_file`` is where the call's first process writes its pid."""

    def __init__(self, folder: str, version: int):
        self.folder = folder
        self.version = version
        self.procs_file = os.path.join(folder, "cgroup.procs")

    @classmethod
    def create(cls, memory_mb: int) -> CallCgroup | None:
        """A new cgroup capped at ``memory_mb`` MiB, or ``None`` where this host does not allow one."""
        own = _own_memory_cgroup()
        if own is None:
            return None
        parent, version = own
        folder = os.path.join(parent, f"{_PREFIX}{os.getpid()}-{next(_COUNTER)}")
        try:
            os.mkdir(folder)
        except OSError:
            return None
        group = cls(folder, version)
        limit = str(memory_mb * 1024 * 1024)
        files = (
            [("memory.limit_in_bytes", limit), ("memory.memsw.limit_in_bytes", limit)]
            if version == 1
            else [("memory.max", limit), ("memory.swap.max", "0")]
        )
        try:
            for name, value in files:
                path = os.path.join(folder, name)
                if os.path.exists(path) or name in ("memory.limit_in_bytes", "memory.max"):
                    with open(path, "w") as handle:
                        handle.write(value)
        except OSError:
            group.remove()
            return None
        return group

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of this call for exceeding the cap."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        try:
            with open(os.path.join(self.folder, name)) as handle:
                for line in handle:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and int(value) > 0:
                        return True
        except (OSError, ValueError):
            pass
        return False

    def remove(self, attempts: int = 100) -> None:
        """Kill whatever is still in the cgroup, then remove it."""
        _remove(self.folder, attempts)


def _remove(folder: str, attempts: int = 100) -> None:
    for _ in range(attempts):
        try:
            with open(os.path.join(folder, "cgroup.procs")) as handle:
                pids = [int(line) for line in handle if line.strip()]
        except OSError:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.rmdir(folder)
            return
        except OSError:
            time.sleep(0.01)


def sweep_stale() -> int:
    """Remove call cgroups left by processes that died mid-call (e.g. a SIGKILLed trainer)."""
    own = _own_memory_cgroup()
    if own is None:
        return 0
    removed = 0
    try:
        names = os.listdir(own[0])
    except OSError:
        return 0
    for name in names:
        if name.startswith(_PREFIX) and not _pid_alive(name):
            _remove(os.path.join(own[0], name))
            removed += 1
    return removed


def _pid_alive(name: str) -> bool:
    """Whether the process named in ``rapo-python-<pid>-...`` is alive (True when unsure)."""
    try:
        pid = int(name[len(_PREFIX) :].split("-", 1)[0])
        os.kill(pid, 0)
    except ValueError:
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
