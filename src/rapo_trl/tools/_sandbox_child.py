"""Runs inside the sandbox subprocess: isolate, limit, drop privileges, then run the model's code.

Started by ``PythonTool`` as ``python -I -B -X utf8 _sandbox_child.py CONFIG_JSON``; the code comes
on the file descriptor ``code_fd`` (an unlinked file: nothing of a call is left on the host's disk).
Standard library only, and it must not import rapo_trl (fast start; the code runs with ``-I``). Each
isolation layer is tried and recorded; a layer the OS refuses is skipped, so the code still runs on a
laptop or in a container without namespaces. The report of active layers is written as JSON to the
file descriptor ``report_fd`` before the model's code starts.
"""

from __future__ import annotations

import ast
import builtins
import ctypes
import json
import linecache
import os
import resource
import select
import signal
import stat
import sys
import tempfile
import traceback
import types

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
CLONE_NEWPID = 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
# Per-mount flags a read-only bind remount must repeat (leaving one out would try to clear it).
_MOUNT_OPTION_FLAGS = {
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": 0x400,
    "nodiratime": 0x800,
    "relatime": 0x200000,
    "strictatime": 0x1000000,
}
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 4, 24, 38
# What the minimal filesystem view shows of /etc and /dev (read-only binds; missing ones skipped).
_ETC = (
    "alternatives", "ca-certificates", "fonts", "group", "hosts", "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
    "localtime", "mime.types", "nsswitch.conf", "os-release", "passwd", "ssl",
)  # fmt: skip
_DEV = ("null", "zero", "full", "random", "urandom")
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
# Packages an installed interpreter's site-packages may hold that the view shows empty: rapo_trl's data holds the
# held-out stories, and its tasks draw eval questions with their answers.
_HIDDEN_PACKAGES = ("rapo_trl",)
FILENAME = "<code>"
LINUX = sys.platform.startswith("linux")

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def enc(value):
        return None if value is None else os.fsencode(value)

    result = _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data))
    _check(result, f"mount {target}")


def _enter_namespaces(is_root: bool) -> bool:
    """New mount, network and pid namespaces (plus a user namespace when not root). True on success."""
    flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | (0 if is_root else CLONE_NEWUSER)
    if not LINUX:
        return False
    try:
        _check(_libc.unshare(ctypes.c_int(flags)), "unshare")
    except OSError:
        return False
    if not is_root:
        # Map our own ids so the process keeps its identity inside the user namespace.
        uid, gid = os.getuid(), os.getgid()
        try:
            for name, text in (
                ("setgroups", "deny"),
                ("uid_map", f"{uid} {uid} 1"),
                ("gid_map", f"{gid} {gid} 1"),
            ):
                with open(f"/proc/self/{name}", "w") as handle:
                    handle.write(text)
        except OSError:
            pass
    return True


_INNER: list[int] = []  # pid of the namespace's init, for the caller-death handler


def _on_caller_death(config: dict):
    """SIGTERM handler of the waiter (sent by the kernel when the caller dies, see PR_SET_PDEATHSIG):
    kill the namespace's init, which ends every process of the call, then remove the call's cgroup,
    so a SIGKILLed trainer leaves nothing behind."""

    def handler(number, frame):
        try:
            for pid in _INNER:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        except OSError:
            pass
        procs = config.get("cgroup_procs")
        if procs and config.get("in_cgroup"):
            folder = os.path.dirname(procs)
            try:  # leave the cgroup (it cannot be removed while it holds us), then remove it
                with open(os.path.join(os.path.dirname(folder), "cgroup.procs"), "w") as handle:
                    handle.write(str(os.getpid()))
                for _ in range(200):
                    try:
                        os.rmdir(folder)
                        break
                    except OSError:  # the namespace's other processes are still exiting
                        select.select([], [], [], 0.01)
            except OSError:
                pass
        os._exit(1)

    return handler


def _become_pid_namespace_init(config: dict) -> None:
    """Fork pid 1 of the new pid namespace (it runs the code in a child, ``_run_under_init``); this process
    only mirrors the code's end.

    When pid 1 of a namespace dies the kernel kills and reaps everything else in it, so no process the
    code started (even one that left the process group) outlives the call or leaves zombies behind.
    Pid 1 dies with this process, and this process with the caller (cleaning up on its way out).
    """
    report_fd = config["report_fd"]
    alive_read, alive_write = os.pipe()
    status_read, config["status_fd"] = os.pipe()  # the code's wait status, passed on by pid 1
    pid = os.fork()
    if pid == 0:
        os.close(alive_write)
        os.close(status_read)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _die_with_parent()
        # The waiter may have died before prctl took effect: its end of the pipe is then closed.
        if select.select([alive_read], [], [], 0)[0]:
            os._exit(1)
        os.close(alive_read)
        return
    _INNER.append(pid)
    os.close(alive_read)  # alive_write stays open as long as this process lives
    os.close(config["status_fd"])
    os.close(report_fd)
    _, status = os.waitpid(pid, 0)
    passed_on = os.read(status_read, 32)  # nothing if pid 1 itself was killed (timeout, caller gone)
    status = int(passed_on) if passed_on else status
    if os.WIFSTOPPED(status):
        # The caller watches this process for stops as well as its end (``PythonTool``): stopping too shows it the
        # code's stop at once. Pid 1 has exited and ended the code; dying with the caller needs no cleanup now, and
        # a stopped process would not run the SIGTERM handler.
        _die_with_parent()
        os.kill(os.getpid(), signal.SIGSTOP)
        os._exit(1)
    if os.WIFSIGNALED(status):
        # Die of the same signal so the caller sees the real cause (e.g. SIGXCPU); never dump core.
        number = os.WTERMSIG(status)
        _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        if number not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def _run_under_init(status_fd: int) -> None:
    """Fork the process that runs the code; this one stays pid 1 until it ends.

    The kernel drops a signal that pid 1 of a namespace sends itself without a handler for it
    (``os.kill(os.getpid(), SIGTERM)``, ``os.abort()``): code running as pid 1 would live on. Pid 1 reaps
    the orphans the code leaves and passes the code's wait status on, a stop included (nothing would resume
    it); its exit ends the namespace.
    """
    code_pid = os.fork()
    if code_pid == 0:
        os.close(status_fd)
        return
    # A signal the code sends pid 1 (one with a Python handler, SIGINT) stays pending instead of raising here.
    signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    while (ended := os.waitpid(-1, os.WUNTRACED))[0] != code_pid:
        pass
    os.write(status_fd, str(ended[1]).encode())
    os._exit(0)


def _die_with_parent(parent_pid: int | None = None, number: int = signal.SIGKILL) -> None:
    """Get signal ``number`` when the parent dies (a SIGKILLed trainer must not leave code running)."""
    if LINUX:
        _libc.prctl(PR_SET_PDEATHSIG, number, 0, 0, 0)
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)  # the parent died before prctl took effect


def _join_cgroup(procs_file: str | None) -> bool:
    """Move this process into the call's cgroup (a whole-call memory cap) before it allocates or forks."""
    if not procs_file:
        return False
    try:
        with open(procs_file, "w") as handle:
            handle.write(str(os.getpid()))
    except OSError:
        return False
    return True


def _read_code(code_fd: int) -> str:
    chunks = []
    while chunk := os.read(code_fd, 1 << 20):
        chunks.append(chunk)
    os.close(code_fd)
    return b"".join(chunks).decode("utf-8")


def _prefixes() -> list[str]:
    """The interpreter's installation prefixes (stdlib, site-packages, a virtualenv's) and its executable,
    each by its real path and by the path the interpreter names it by. The two differ when a symlink
    leads there (a project's ``.venv`` linking to a virtualenv under ``/tmp``); ``sys.prefix``,
    ``sys.path`` and ``sys.executable`` keep the link's path, so the view must show both."""
    found = set()
    # A prefix that is "/" or leads there (a link to "/") would show the host's whole tree: never bound.
    for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix):
        if os.path.isdir(prefix) and os.path.realpath(prefix) != "/":
            found.update((os.path.realpath(prefix), os.path.abspath(prefix)))
    if sys.executable and os.path.dirname(os.path.realpath(sys.executable)) != "/":
        found.update((os.path.dirname(os.path.realpath(sys.executable)), os.path.abspath(sys.executable)))
    return sorted(found - {"/"})


def _view_paths(paths) -> list[str]:
    """The existing ``paths`` minus those below one kept before (visible through it). A path below a
    symlink kept as a link (``/bin -> usr/bin``) is skipped too: making its mount point would follow
    the link and write into the host's folder."""
    kept: list[str] = []
    for path in paths:
        if os.path.lexists(path) and not _under(path, kept):
            kept.append(path)
    return kept


def _under(path: str, roots) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _hidden_package_dirs() -> list[str]:
    """The folders of :data:`_HIDDEN_PACKAGES` on ``sys.path``, by the path the interpreter names them by and by their
    real path: the view may show a virtualenv at both, each its own mount."""
    found = set()
    for entry in sys.path:
        for name in _HIDDEN_PACKAGES:
            folder = os.path.join(entry, name) if entry else ""
            if folder and os.path.isdir(folder):
                found.update((os.path.abspath(folder), os.path.realpath(folder)))
    return sorted(found)


def _hide_packages(staging: str, folders, visible) -> None:
    """An empty tmpfs over each of ``folders`` the view shows (below one of ``visible``), made read-only later with
    every other mount."""
    for folder in folders:
        if _under(folder, visible) and os.path.isdir(staging + folder):
            _mount("tmpfs", staging + folder, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0555")


def _minimal_root(size_mb: int, owner: int) -> tuple[list[str], list[str]]:
    """chroot into a new root that shows only the interpreter, the system's libraries and a private
    ``/tmp`` (a tmpfs of ``size_mb`` owned by ``owner``, also the working dir); everything but
    ``/tmp`` read-only. Returns the host paths that stay visible and the mounts that stayed
    writable. Needs a private mount namespace.

    The view is assembled on a tmpfs mounted over the host's ``/tmp`` (hidden only inside this
    namespace); sources are opened before that, so a source below ``/tmp`` still works.
    """
    os.umask(0o022)
    paths = _view_paths((*_SYSTEM_DIRS, *_prefixes(), *(f"/etc/{n}" for n in _ETC), *(f"/dev/{n}" for n in _DEV)))
    # A system link is recreated as is; any other path is bound to what it resolves to (O_PATH follows links).
    sources = [(p, None if os.path.islink(p) and p in _SYSTEM_DIRS else os.open(p, os.O_PATH)) for p in paths]
    hidden = _hidden_package_dirs()  # found before the host's /tmp is covered, where a virtualenv may live
    staging = "/tmp"
    _mount("tmpfs", staging, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    # The private /tmp goes in first: an interpreter that lives below the host's /tmp (a virtualenv in a
    # checkout under /tmp) is then bound into it below, read-only, instead of being hidden by it.
    os.mkdir(f"{staging}/tmp")
    _mount("tmpfs", f"{staging}/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={size_mb}m,mode=0711,uid={owner},gid={owner}")
    visible = []
    for path, descriptor in sources:
        target = staging + path
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if descriptor is None:  # /bin -> usr/bin on merged-/usr systems: the same link
            os.symlink(os.readlink(path), target)
            continue
        if os.path.isdir(f"/proc/self/fd/{descriptor}"):
            os.makedirs(target, exist_ok=True)
        else:
            open(target, "w").close()
        _mount(f"/proc/self/fd/{descriptor}", target, None, MS_BIND | MS_REC)
        os.close(descriptor)
        visible.append(path)
    _hide_packages(staging, hidden, visible)
    os.mkdir(f"{staging}/proc")
    _mount("proc", f"{staging}/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    os.makedirs(f"{staging}/dev/shm")
    shm = _private_shm(f"{staging}/dev/shm", size_mb)
    os.chroot(staging)
    os.chdir("/")
    # From here on nothing raises: the view is in place, at worst with some mounts left writable.
    failed = _remount_read_only(keep={"/tmp", "/proc", *shm})
    # Paths the code can no longer see (e.g. an editable install's sources) leave sys.path.
    sys.path[:] = [entry for entry in sys.path if entry and os.path.exists(entry)]
    return visible, failed


def _private_shm(path: str, size_mb: int) -> set[str]:
    """A tmpfs of the call's own on ``path`` (the view's ``/dev/shm``), where ``multiprocessing`` keeps its locks
    and semaphores; the host's stays out of sight. Returns ``{"/dev/shm"}`` to keep writable, or nothing where
    the mount failed (the code then runs without it)."""
    if not os.path.isdir(path):
        return set()
    try:
        _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size_mb}m,mode=1777")
    except OSError:
        return set()
    return {"/dev/shm"}


def _remount_read_only(keep: set[str]) -> list[str]:
    """Remount every mount read-only except those in ``keep``; returns the ones that failed."""
    failed = []
    with open("/proc/self/mountinfo") as handle:
        mounts = [line.split() for line in handle]
    for fields in mounts:
        # Mount points are octal-escaped in mountinfo (a space is \040).
        target = fields[4].encode().decode("unicode_escape")
        if target in keep:
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        for option in fields[5].split(","):
            flags |= _MOUNT_OPTION_FLAGS.get(option, 0)
        try:
            _mount(None, target, None, flags)
        except OSError:
            failed.append(target)
    return failed


def _python_paths() -> list[str]:
    """Everything the interpreter may still read once the code runs (stdlib, site-packages)."""
    paths = {os.path.realpath(sys.executable)}
    paths.update(os.path.realpath(p) for p in sys.path if p and os.path.exists(p))
    return sorted(paths)


def _expose_python(paths: list[str]) -> list[str]:
    """Make the interpreter reachable for an unprivileged uid without changing the host's files.

    A directory on the way that others may not traverse (e.g. ``/root`` holding pyenv) is covered by
    an empty tmpfs into which only the needed child is bind-mounted back, which also hides the rest of
    that directory (credentials, caches) from the code. Only called inside a private mount namespace.
    """
    covered: dict[str, int] = {}
    bound: set[str] = set()
    for path in paths:
        parts = path.split("/")
        for depth in range(2, len(parts)):
            directory, child = "/".join(parts[:depth]), parts[depth]
            if directory not in covered:
                if os.stat(directory).st_mode & stat.S_IXOTH:
                    continue
                original = os.open(directory, os.O_PATH | os.O_DIRECTORY)
                _mount("tmpfs", directory, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k")
                covered[directory] = original
            target = f"{directory}/{child}"
            if target in bound:
                continue
            source = f"/proc/self/fd/{covered[directory]}/{child}"
            if os.path.isdir(source):
                os.mkdir(target)
            else:
                open(target, "w").close()
            _mount(source, target, None, MS_BIND | MS_REC)
            bound.add(target)
    for descriptor in covered.values():
        os.close(descriptor)
    return sorted(covered)


def _read_only_except(workdir: str, size_mb: int, owner: int) -> list[str]:
    """Put a fresh tmpfs of ``size_mb`` on ``workdir`` (bounding what the code can write in total) and one on
    ``/dev/shm``, and remount every other mount read-only. Returns the mounts that stayed writable."""
    options = f"size={size_mb}m,mode=0700,uid={owner},gid={owner}"
    _mount("tmpfs", workdir, "tmpfs", MS_NOSUID | MS_NODEV, options)
    return _remount_read_only(keep={workdir, *_private_shm("/dev/shm", size_mb)})


def _reachable_by_others(paths: list[str]) -> bool:
    """Whether a uid that is neither owner nor group member can read all of ``paths``."""
    for path in paths:
        probe = path
        while probe not in ("/", ""):
            mode = os.stat(probe).st_mode
            needed = stat.S_IXOTH if stat.S_ISDIR(mode) else 0
            if probe == path:
                needed |= stat.S_IROTH
            if mode & needed != needed:
                return False
            probe = os.path.dirname(probe)
    return True


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _drop_capabilities() -> bool:
    """Empty the bounding, effective, permitted and inheritable capability sets."""
    if not LINUX:
        return False
    for capability in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            break
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3: two 32-bit data words
    data = (_CapData * 2)()
    return _libc.capset(ctypes.byref(header), data) == 0


def _count_tasks(uid: int) -> int:
    """Threads (what RLIMIT_NPROC counts) currently owned by ``uid``."""
    total = 0
    try:
        entries = os.listdir("/proc")
    except OSError:  # no /proc (macOS): the limit then counts only what the code starts
        return 0
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as handle:
                status = dict(line.split(":", 1) for line in handle if ":" in line)
            if int(status["Uid"].split()[0]) == uid:
                total += int(status["Threads"])
        except (OSError, KeyError, ValueError):
            continue
    return total


class CPUTimeLimitExceeded(BaseException):
    """Raised in the code at the soft CPU limit (a BaseException, so ``except Exception`` won't hide it)."""


def _on_cpu_limit(number, frame):
    raise CPUTimeLimitExceeded("the code used up its CPU time limit")


def _set_limits(config: dict, other_tasks: int) -> None:
    memory = config["memory_mb"] * 1024 * 1024
    cpu = max(1, int(config["cpu_seconds"] + 0.999))
    file_size = config["max_file_mb"] * 1024 * 1024
    limits = [
        (resource.RLIMIT_AS, memory, memory),
        (resource.RLIMIT_CPU, cpu, cpu + 1),
        (resource.RLIMIT_FSIZE, file_size, file_size),
        (resource.RLIMIT_CORE, 0, 0),
        (resource.RLIMIT_NOFILE, 256, 256),
    ]
    # RLIMIT_NPROC counts every task of the real uid: on a uid shared with the user's other programs
    # their tasks are added so the code can still start a few processes of its own.
    processes = config["max_processes"] + other_tasks
    limits.append((resource.RLIMIT_NPROC, processes, processes))
    for which, soft, hard in limits:
        try:
            resource.setrlimit(which, (soft, hard))
        except (ValueError, OSError):
            pass
    # A handler, because pid 1 of a namespace ignores SIGXCPU's default action; the hard limit one second
    # later still kills code that catches the exception.
    signal.signal(signal.SIGXCPU, _on_cpu_limit)


def _block_sockets() -> None:
    """Best-effort network block when no network namespace could be made (bypassable via ctypes)."""
    import _socket
    import socket

    def refuse(*args, **kwargs):
        raise PermissionError("network access is disabled in this sandbox")

    class NoSocket(socket.socket):
        def __init__(self, *args, **kwargs):
            refuse()

    socket.socket = _socket.socket = NoSocket
    for name in ("create_connection", "getaddrinfo", "gethostbyname", "socketpair", "fromfd"):
        setattr(socket, name, refuse)


def isolate(config: dict) -> dict:
    """Apply every layer the OS allows; returns which ones are active."""
    is_root = os.geteuid() == 0
    uid = config.get("uid")
    will_drop = is_root and uid is not None
    owner = uid if will_drop else os.getuid()
    # Counted before /proc is replaced by the namespace's own view.
    other_tasks = 0 if will_drop or is_root else _count_tasks(os.getuid())
    report: dict = {"root": is_root, "namespaces": config["namespaces"] and _enter_namespaces(is_root)}
    report["network"] = "namespace" if report["namespaces"] else "socket-patch"
    report["memory"] = "cgroup" if config.get("in_cgroup") else "per-process"
    if report["namespaces"]:
        _become_pid_namespace_init(config)
        report["pid_namespace"] = os.getpid() == 1
        workdir = "/tmp"  # a private tmpfs inside the namespace: nothing of the call lands on the host
        try:
            _mount(None, "/", None, MS_REC | MS_PRIVATE)
        except OSError as error:
            report["filesystem"] = f"unchanged ({error})"
        else:
            _isolate_filesystem(config, report, will_drop, owner, workdir)
    else:
        # No namespaces: a host folder of the call's own (0700, the call's uid), removed by the caller.
        workdir = tempfile.mkdtemp(prefix=f"rapo-python-{config['parent_pid']}-")
        if will_drop:
            os.chown(workdir, uid, uid)
        report["filesystem"] = "unchanged"
        report["workdir"] = workdir
    os.environ["HOME"] = os.environ["TMPDIR"] = tempfile.tempdir = workdir
    paths = _python_paths()
    if will_drop and not _reachable_by_others(paths):
        will_drop = False
        report["uid_note"] = "interpreter not readable by an unprivileged uid; staying root"
    # Re-enter the working dir by path (the old cwd may lie below a tmpfs mounted above), before
    # dropping privileges in case a directory on the way is closed to the sandbox uid.
    os.chdir(workdir)
    _set_limits(config, other_tasks + int(report["namespaces"]))  # pid 1 is one more task (_run_under_init)
    if will_drop:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        report["uid"] = uid
    else:
        report["uid"] = os.getuid()
        report["capabilities_dropped"] = _drop_capabilities()
    report["no_new_privs"] = LINUX and _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
    if not report["namespaces"]:
        _block_sockets()
    return report


def _isolate_filesystem(config: dict, report: dict, will_drop: bool, owner: int, workdir: str) -> None:
    """The minimal view where it can be built, else the host's mounts read-only; a private ``/tmp``."""
    try:
        visible, failed = _minimal_root(config["max_disk_mb"], owner)
    except OSError as error:
        report["minimal_view_error"] = str(error)
    else:
        report["filesystem"] = "minimal" if not failed else "minimal-partial"
        report["visible"] = visible
        if failed:
            report["writable_mounts"] = failed
        return
    try:
        try:  # a /proc of the namespace: the code sees only its own processes
            _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        except OSError:
            pass
        paths = _python_paths()
        if will_drop and not _reachable_by_others(paths):
            report["hidden"] = _expose_python(paths)
        failed = _read_only_except(workdir, config["max_disk_mb"], owner)
        report["filesystem"] = "read-only" if not failed else "read-only-partial"
        if failed:
            report["writable_mounts"] = failed
    except OSError as error:
        report["filesystem"] = f"unchanged ({error})"


def run_code(source: str, show_last: bool) -> int:
    """Run ``source`` as ``__main__``; print the last bare expression's repr like a notebook does."""
    linecache.cache[FILENAME] = (len(source), None, source.splitlines(True), FILENAME)
    try:
        tree = ast.parse(source, FILENAME)
    except SyntaxError as error:
        traceback.print_exception(type(error), error, None)
        return 1
    last = tree.body.pop() if show_last and tree.body and isinstance(tree.body[-1], ast.Expr) else None
    # The code's module is sys.modules["__main__"], as a script's is: unittest.main(), doctest.testmod() and pickle
    # look the code's names up there, and in this bootstrap's module would find none of them.
    main_module = types.ModuleType("__main__")
    main_module.__builtins__ = builtins
    sys.modules["__main__"] = main_module
    namespace = main_module.__dict__
    # As a script run with no arguments: the bootstrap's own (its config) would reach argparse and sys.argv[1:].
    sys.argv[:] = [FILENAME]
    try:
        exec(compile(tree, FILENAME, "exec"), namespace)
        if last is not None:
            value = eval(compile(ast.Expression(last.value), FILENAME, "eval"), namespace)
            if value is not None:
                print(repr(value))
    except SystemExit as error:
        code = error.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)
        return 1
    except BaseException as error:  # noqa: BLE001 - everything the code raises is reported to the model
        report = traceback.TracebackException(type(error), error, error.__traceback__)
        # Only the code's own frames: this file's (the exec call, the CPU-limit handler) are noise.
        report.stack = traceback.StackSummary.from_list([f for f in report.stack if f.filename != __file__])
        print("".join(report.format()), end="", file=sys.stderr)
        return 1
    return 0


def main() -> None:
    config = json.loads(sys.argv[1])
    # Until the code runs, the caller's death is a SIGTERM that cleans up (the call's cgroup, the
    # namespace's processes); the code itself only ever runs under a plain SIGKILL.
    signal.signal(signal.SIGTERM, _on_caller_death(config))
    _die_with_parent(config.get("parent_pid"), signal.SIGTERM)
    config["in_cgroup"] = _join_cgroup(config.get("cgroup_procs"))
    # The bootstrap's own folder must not shadow the code's imports (and may not exist in its view).
    if sys.path and os.path.realpath(sys.path[0]) == os.path.dirname(os.path.realpath(__file__)):
        del sys.path[0]
    source = _read_code(config["code_fd"])
    report_fd = config["report_fd"]
    try:
        report = isolate(config)
    except Exception as error:  # noqa: BLE001 - a setup failure is reported, never runs the code
        os.write(report_fd, json.dumps({"setup_error": repr(error)}).encode())
        os._exit(70)
    os.write(report_fd, json.dumps(report).encode())
    os.close(report_fd)
    if not report["namespaces"]:  # this process runs the code: it must die outright with the caller
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _die_with_parent(config.get("parent_pid"))
    # Line by line, as on a terminal: a call killed at its time or memory limit must still show what it printed
    # before (a file's block buffer would die with the process, unwritten).
    sys.stdout.reconfigure(line_buffering=True)
    if report["namespaces"]:
        _run_under_init(config["status_fd"])
    status = run_code(source, config["show_last_expression"])
    # Flushed as at a script's exit (os._exit below skips it), the streams the code replaced too. One it closed or
    # set to None is no failure of the code's; an OSError (the file size limit) is.
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except (AttributeError, ValueError):
            pass
    # os._exit: threads the code left running must not keep the sandbox alive.
    os._exit(status)


if __name__ == "__main__":
    main()
