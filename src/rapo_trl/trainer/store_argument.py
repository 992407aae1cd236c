"""The ``trace_store`` argument as the trainer takes it: a store object, or the folder of a built store.

A folder name is opened as :class:`~rapo_trl.TraceStore` with ``must_exist=True``, as a model name is loaded: an
object that cannot retrieve (a typo'd path, a dict) is refused here, at construction, since at the first retrieval
its error would read like a store outage and the run would go on without retrieval.
"""

from __future__ import annotations

import os
from pathlib import Path


def as_trace_store(trace_store):
    """``trace_store`` itself when it can ``select``; a built store opened from a folder path; else ``TypeError``."""
    if trace_store is None or callable(getattr(trace_store, "select", None)):
        return trace_store
    if isinstance(trace_store, (str, os.PathLike)):
        path = Path(trace_store).expanduser()
        if not path.is_dir():
            raise FileNotFoundError(
                f"trace_store={str(trace_store)!r} is not a folder: give the folder of a built store (`rapo "
                "build-store`, TraceStore.build_from_agent or add_from_dataset) or a TraceStore object."
            )
        from rapo_trl.store import TraceStore

        return TraceStore(path, must_exist=True)
    raise TypeError(
        f"trace_store must be a TraceStore (or anything with select(contexts)) or a built store's folder, got "
        f"{type(trace_store).__name__}."
    )
