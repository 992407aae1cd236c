"""Records to import that repeat an id, refused before any is written: a store keeps one record per id, so it would
keep one of each repeated id and drop the others (which one, and whether Chroma raises instead, depending on how
the writes fall into batches)."""

from __future__ import annotations

from collections.abc import Iterable

from rapo_trl.store.errors import DuplicateRecordError

SHOWN_IDS = 5
"""How many repeated ids an error names (the first in row order); the others are counted."""
SHOWN_ROWS = 3
"""How many rows of each named id an error lists."""


def dataset_origin(ds) -> str:
    """Where a ``datasets.Dataset`` was read from, for an error to name: its files, else that it was given as it is."""
    files = [entry["filename"] for entry in getattr(ds, "cache_files", None) or []]
    if not files:
        return "the dataset given"
    return f"the dataset read from {files[0]}" + (f" and {len(files) - 1} more file(s)" if len(files) > 1 else "")


def check_unique_ids(ids: Iterable[str], origin: str) -> None:
    """Raise :class:`DuplicateRecordError` naming the first repeated ids of ``ids`` (one per row), their rows and
    ``origin``, when any id comes more than once."""
    rows: dict[str, list[int]] = {}
    for row, record_id in enumerate(ids):
        rows.setdefault(record_id, []).append(row)
    repeated = [(record_id, at) for record_id, at in rows.items() if len(at) > 1]
    if not repeated:
        return
    named = "; ".join(
        f"{record_id!r} at rows {', '.join(map(str, at[:SHOWN_ROWS]))}{' ...' if len(at) > SHOWN_ROWS else ''}"
        for record_id, at in repeated[:SHOWN_IDS])
    more = f" and {len(repeated) - SHOWN_IDS} more" if len(repeated) > SHOWN_IDS else ""
    raise DuplicateRecordError(
        f"{len(repeated)} record id(s) repeat in the records to import: {named}{more} (in {origin}). A store keeps one "
        "record per id, so it would keep one of each and drop the others; nothing was stored. Keep one row of each "
        "id and import again.")
