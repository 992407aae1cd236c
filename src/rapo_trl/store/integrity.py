"""A store that would retrieve wrongly, found before training rather than by its retrievals: records without a
usable reward (retrieval ranks candidates by it), and a vector index that cannot be searched or misses records (an
index file deleted or damaged: Chroma then answers from what is left, or fails at the first query).

The index is probed with stored records' own vectors: a record the index holds is its own nearest neighbour (or ties
with an identical one). The probe reads a few records spread over the collection, so it costs a handful of Chroma
calls at any size; the rewards are read in full, which also fills the store's reward map that retrieval reads."""

from __future__ import annotations

import math

import numpy as np

from rapo_trl.store.errors import CorruptStoreError

PROBES = 32
PROBE_READS = 8
REBUILD = ("Rebuild it into a new folder or collection (`rapo build-store --store_path NEW`, or "
           "`TraceStore.from_dataset(old.to_dataset(), NEW)` to keep its records)")


def usable_reward(value) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def stored_reward(store, record_id: str, metadata: dict | None) -> float:
    """A stored record's reward; :class:`CorruptStoreError` for a record without a usable one."""
    value = (metadata or {}).get("reward")
    if not usable_reward(value):
        what = "no reward" if value is None else f"the reward {value!r}"
        raise CorruptStoreError(f"Record {record_id} of the trace store {store.location} (collection "
                                f"{store.collection_name!r}) has {what}: retrieval ranks records by reward. {REBUILD}.")
    return float(value)


def check_rewards(store) -> int:
    """Read every record's reward into ``store``'s reward map; refuse the store if any record has none usable.
    Returns the number of records."""
    rewards, bad = {}, []
    for page in store.iter_batches():
        for record_id, metadata in zip(page["ids"], page["metadatas"], strict=True):
            value = (metadata or {}).get("reward")
            if usable_reward(value):
                rewards[record_id] = float(value)
            else:
                bad.append(f"{record_id} ({'none' if value is None else repr(value)})")
    if bad:
        raise CorruptStoreError(
            f"{len(bad)} of {len(rewards) + len(bad)} records of the trace store {store.location} (collection "
            f"{store.collection_name!r}) have no usable reward, e.g. {', '.join(bad[:3])}: retrieval ranks records "
            f"by reward, so it would choose among them wrongly. {REBUILD}, or delete those records."
        )
    store._rewards = rewards
    return len(rewards)


def _probe_vectors(store, count: int) -> np.ndarray:
    """Stored vectors of up to ``PROBES`` records, read at ``PROBE_READS`` offsets spread over the collection."""
    per_read = max(1, PROBES // PROBE_READS)
    offsets = sorted({int(i * max(count - per_read, 0) / max(PROBE_READS - 1, 1)) for i in range(PROBE_READS)})
    vectors = []
    for offset in offsets:
        page = store.collection.get(limit=per_read, offset=offset, include=["embeddings"])
        vectors.extend(page["embeddings"])
    return np.asarray(vectors, dtype=np.float32)


def _self_distance(vectors: np.ndarray, space: str) -> np.ndarray:
    """Each vector's distance to itself in Chroma's convention for ``space``. A zero vector (what an embedder may give
    a text without words) is at cosine distance 1 from every vector, itself included."""
    squares = (vectors * vectors).sum(axis=1)
    if space == "ip":
        return 1.0 - squares
    if space == "cosine":
        return np.where(squares > 0, 0.0, 1.0).astype(np.float32)
    return np.zeros(len(vectors), dtype=np.float32)


def check_index(store) -> None:
    """Refuse a store whose vector index cannot be searched, or does not find a quarter of the probed records
    (HNSW is approximate, so a stray miss is not taken for damage)."""
    count = store.collection.count()
    if count == 0:
        return
    where = f"The vector index of the trace store {store.location} (collection {store.collection_name!r})"
    try:
        vectors = _probe_vectors(store, count)
        found = store.collection.query(query_embeddings=vectors, n_results=1, include=["distances"])
    except Exception as error:  # Chroma's own InternalError for an index it cannot load
        raise CorruptStoreError(f"{where} cannot be searched ({type(error).__name__}: {error}): an index file is "
                                f"missing or damaged. {REBUILD}.") from error
    nearest = np.array([row[0] if row else np.inf for row in found["distances"]], dtype=np.float64)
    missed = int((nearest > _self_distance(vectors, store.config.hnsw_space) + 1e-3).sum())
    if missed > len(vectors) // 4:
        raise CorruptStoreError(
            f"{where} misses records: {missed} of {len(vectors)} probed records are not found by their own vector "
            f"(an index file was deleted or damaged, so retrieval would search only part of the {count} records). "
            f"{REBUILD}."
        )


def check_store(store) -> None:
    """Both checks: what a trainer runs before it trains (``TraceStore.check``)."""
    from chromadb.errors import InternalError

    try:
        check_rewards(store)
    except InternalError as error:  # reading records loads the index too: a missing index file fails here first
        raise CorruptStoreError(f"The trace store {store.location} (collection {store.collection_name!r}) cannot be "
                                f"read ({error}): an index file is missing or damaged. {REBUILD}.") from error
    check_index(store)
