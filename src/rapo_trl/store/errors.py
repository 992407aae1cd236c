"""Errors a trace store raises; each names the store and the problem."""

from __future__ import annotations


class TraceStoreError(Exception):
    """Base class of trace-store errors."""


class EmbedderMismatchError(TraceStoreError, ValueError):
    """The collection was built with another embedder or dimension than the one given."""

    def __init__(self, message: str, stored: tuple[str, int] | None = None):
        super().__init__(message)
        self.stored = stored
        """``(name, dimension)`` of the embedder the collection records; None when it records none."""


class KeySettingsMismatchError(TraceStoreError, ValueError):
    """The collection's keys were cut otherwise than the ``StoreConfig`` given cuts queries: to another
    ``key_max_chars``, or of another ``system_prompt``."""


class DuplicateRecordError(TraceStoreError, ValueError):
    """Records to import repeat an id: a store keeps one record per id, so it would keep one of them and drop the
    others (which one depending on how the writes were batched)."""


class StorePathError(TraceStoreError, OSError):
    """The store's directory cannot be created or written."""


class CorruptStoreError(TraceStoreError, RuntimeError):
    """The files at the store's path are not a readable Chroma database."""


class StoreLockedError(TraceStoreError, RuntimeError):
    """Another process holds the embedded store's folder (embedded Chroma is single-process)."""


class MissingCollectionError(TraceStoreError, LookupError):
    """The store has no collection of the name asked for, and the caller needs one that was built."""


class StaleStoreError(TraceStoreError, ValueError):
    """The collection was built in another store format (keys made differently): it must be rebuilt to be used."""
