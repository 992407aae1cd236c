"""A store's HNSW index settings in its export: the columns an export writes them to, and the ``StoreConfig`` of a
store rebuilt from the export, which searches as the exported store did (Chroma fixes them when a collection is
created, so a rebuild with the defaults would rank neighbours by another distance, with no error)."""

from __future__ import annotations

import dataclasses
import logging

from rapo_trl.store.config import StoreConfig
from rapo_trl.store.errors import KeySettingsMismatchError

logger = logging.getLogger(__name__)

INDEX_COLUMNS = ("hnsw_space", "hnsw_ef_construction", "hnsw_ef_search", "hnsw_max_neighbors")
"""The export's columns of the index settings, named as their ``StoreConfig`` fields (Chroma's ``hnsw`` keys)."""


def store_index_settings(store) -> dict:
    """The store's index settings as Chroma built its collection (a later open asking for others changes none of them;
    ``collection.modify`` changes ``ef_search``), the store's config for any Chroma does not report."""
    built = (getattr(store.collection, "configuration", None) or {}).get("hnsw") or {}
    settings = {}
    for column in INDEX_COLUMNS:
        value = built.get(column.removeprefix("hnsw_"))
        settings[column] = getattr(store.config, column) if value is None else value
    return settings


def exported_index_settings(ds) -> dict:
    """The index settings an exported dataset records, by column; a column it lacks (an export written before they
    travelled with it) or holding more than one value (exports of several stores joined) is left out."""
    if len(ds) == 0:
        return {}
    settings = {}
    for column in INDEX_COLUMNS:
        values = set(ds[column]) - {None} if column in ds.column_names else set()
        if len(values) == 1:
            value = values.pop()
            settings[column] = str(value) if column == "hnsw_space" else int(value)
    return settings


def index_config(ds, config: StoreConfig) -> StoreConfig:
    """``config`` with the export's index settings where it leaves them at their defaults. Another space asked for
    is refused (:class:`KeySettingsMismatchError`): distances of another kind rank other neighbours first. Another
    ``ef_construction``, ``ef_search`` or ``max_neighbors`` is used, with a warning: they trade speed for recall and
    leave the distances as they were."""
    adopted = {}
    for column, exported in exported_index_settings(ds).items():
        given = getattr(config, column)
        if given == exported:
            continue
        if given == getattr(StoreConfig, column):
            adopted[column] = exported
        elif column == "hnsw_space":
            raise KeySettingsMismatchError(
                f"The records come from a store whose index ranks by {exported!r} distances, but StoreConfig("
                f"hnsw_space={given!r}) was given: its retrievals would rank other neighbours first. Rebuild them with "
                f"hnsw_space={exported!r} (or leave it unset).")
        else:
            logger.warning("The records come from a store built with %s=%s; StoreConfig(%s=%s) was given and is used "
                           "(the index's speed and recall change, its distances do not).", column, exported, column,
                           given)
    return dataclasses.replace(config, **adopted) if adopted else config
