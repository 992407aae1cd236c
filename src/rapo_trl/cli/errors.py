"""How a ``rapo`` command reports what went wrong: a usage error is one line; an error raised in the user's own
code (a reward function, a tool, a dataset loader) keeps the user's part of the traceback, as ``trl grpo`` would
show it. No other ``rapo_trl.cli`` module is imported here, so every one of them can import this one."""

from __future__ import annotations

import os
import sys
import sysconfig
import traceback
from pathlib import Path

TRACEBACK_ENV = "RAPO_TRACEBACK"
MORE = f"{TRACEBACK_ENV}=1 shows the full traceback"


class UsageError(Exception):
    """A problem the user fixes in the config or command line; printed as one line."""


def _library_roots() -> tuple[str, ...]:
    """Folders whose code is not the user's: this package, the standard library, installed packages."""
    paths = sysconfig.get_paths()
    roots = {str(Path(__file__).resolve().parents[1])}  # src/rapo_trl (also in an editable install)
    roots |= {paths[name] for name in ("stdlib", "platstdlib", "purelib", "platlib") if name in paths}
    return tuple(os.path.join(os.path.realpath(root), "") for root in roots)


def _is_users(frame: traceback.FrameSummary, roots: tuple[str, ...]) -> bool:
    # <frozen importlib._bootstrap>, <string>: nobody's file to open
    return not frame.filename.startswith("<") and not os.path.realpath(frame.filename).startswith(roots)


def user_frames(error: BaseException) -> list[traceback.FrameSummary]:
    """The traceback of ``error`` from the first frame in the user's own code on (empty: none is the user's)."""
    frames = traceback.extract_tb(error.__traceback__)
    roots = _library_roots()
    first = next((index for index, frame in enumerate(frames) if _is_users(frame, roots)), None)
    return [] if first is None else frames[first:]


def _in_user_code(error: BaseException) -> tuple[BaseException, list[traceback.FrameSummary]] | None:
    """``error`` or the exception it was raised from (``raise ... from``, or during its handling) with its user
    frames, when one of them came from the user's code."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        frames = user_frames(error)
        if frames:
            return error, frames
        error = error.__cause__ or error.__context__
    return None


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def report(command: str, error: Exception, file=None) -> int:
    """Print ``error`` for ``rapo COMMAND`` and return the exit code: 1 with the user's frames when the user's
    code raised it (a bug to fix there), else 2 with one line (a usage error, or one in rapo_trl itself); a run
    stopped on request (an error with an ``exit_code``: SIGTERM's 143) says so in one line and exits with it."""
    file = file or sys.stderr
    stopped = getattr(error, "exit_code", None)  # a run stopped on request (TrainingStoppedError), not failed
    if isinstance(stopped, int):
        print(f"rapo {command}: stopped: {one_line(error)}", file=file)
        return stopped
    found = None if isinstance(error, UsageError) else _in_user_code(error)
    if found is None:
        print(f"rapo {command}: error: {one_line(error)} ({MORE})", file=file)
        return 2
    raised, frames = found
    roots = _library_roots()
    where = [frame for frame in frames if _is_users(frame, roots)][-1]  # the user's line nearest the raise
    print(f"Traceback (most recent call last; your code's frames, {MORE}):", file=file)
    print("".join(traceback.format_list(frames)), end="", file=file)
    print("".join(traceback.format_exception_only(type(raised), raised)), end="", file=file)
    print(f"rapo {command}: error in your code ({Path(where.filename).name}, line {where.lineno}, in {where.name}): "
          f"{type(raised).__name__}: {one_line(raised)}", file=file)
    return 1
