"""Handing the memory a step freed back to the system, so a long CPU run's resident size stays flat.

PyTorch's CPU tensors come from glibc's ``malloc``. Activations of a few MiB each are served from its heaps once
its mmap threshold has grown past them (it grows with every large block freed), and a heap gives freed pages back
only from its top. A loss whose micro-batches change shape every step leaves the heaps fragmented, and the resident
size grows step after step well past the live tensors; ``malloc_trim(0)`` after each step keeps it flat
(benchmarks/results/measurements_notes.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

from transformers import TrainerCallback


@functools.cache
def _glibc():
    """glibc, when this process runs on it (``malloc_trim`` is a GNU extension), else None."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def release_freed_memory() -> bool:
    """Return the heap pages ``free`` kept to the system (glibc's ``malloc_trim(0)``). False where the C library
    has no such call (musl, macOS, Windows): nothing to do there."""
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


class ReleaseFreedMemory(TrainerCallback):
    """After each optimizer step, hand the step's freed heap back (CPU training: the process's memory is the
    machine's). Costs a walk over the heap, milliseconds against a step of seconds."""

    def on_step_end(self, args, state, control, **kwargs):
        release_freed_memory()


def with_freed_memory_release(callbacks: list | None, device) -> list | None:
    """``callbacks`` with a :class:`ReleaseFreedMemory` added when training runs on the CPU."""
    if getattr(device, "type", device) != "cpu":
        return callbacks
    return [*(callbacks or []), ReleaseFreedMemory()]
