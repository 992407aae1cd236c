"""RAPO's step-trace store on Chroma: build it from an agent or a dataset, retrieve steps by context."""

from rapo_trl.store.agent import TrajectorySampler
from rapo_trl.store.config import DEFAULT_FALLBACK_TEXT, StoreConfig
from rapo_trl.store.environment_build import build_from_environment
from rapo_trl.store.errors import (
    CorruptStoreError,
    DuplicateRecordError,
    EmbedderMismatchError,
    KeySettingsMismatchError,
    MissingCollectionError,
    StaleStoreError,
    StoreLockedError,
    StorePathError,
    TraceStoreError,
)
from rapo_trl.store.selection import Retrieved, Selection, Written
from rapo_trl.store.steps import StepRecord, preprocess_context, split_steps, step_records
from rapo_trl.store.trace_store import TraceStore

__all__ = [
    "DEFAULT_FALLBACK_TEXT",
    "CorruptStoreError",
    "DuplicateRecordError",
    "EmbedderMismatchError",
    "KeySettingsMismatchError",
    "Retrieved",
    "Selection",
    "MissingCollectionError",
    "StaleStoreError",
    "StepRecord",
    "StoreConfig",
    "StoreLockedError",
    "StorePathError",
    "TraceStore",
    "TraceStoreError",
    "TrajectorySampler",
    "Written",
    "build_from_environment",
    "preprocess_context",
    "split_steps",
    "step_records",
]
