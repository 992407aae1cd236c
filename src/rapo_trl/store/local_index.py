"""An optional in-process copy of a trace store's vectors for fast batched k-NN search.

Chroma stays the store of record: this index only proposes neighbour ids and distances. It is filled
from the collection's stored embeddings, follows this process's writes, and is re-synchronised
when the collection's record count differs from its own (another writer added or deleted records);
every record ``select`` returns is read back from Chroma. Two kinds:

* ``"hnsw"``: an hnswlib HNSW graph with the store's HNSW settings (needs the ``hnswlib`` package);
* ``"exact"``: brute-force search over a float32 numpy matrix (exact; only fast for small stores).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

KINDS = ("hnsw", "exact")


class LocalIndex:
    """Record ids and their vectors, searchable in Chroma's distance convention for ``space``."""

    def __init__(
        self,
        kind: str,
        dimension: int,
        space: str = "cosine",
        ef_construction: int = 100,
        ef_search: int = 100,
        max_neighbors: int = 16,
    ):
        if kind not in KINDS:
            raise ValueError(f"Unknown local index kind {kind!r}; expected one of {KINDS} or None.")
        self.kind, self.dimension, self.space = kind, int(dimension), space
        self.ids: list[str] = []  # label -> record id
        self.label_of: dict[str, int] = {}
        self.deleted: set[int] = set()
        if kind == "hnsw":
            try:
                import hnswlib
            except ImportError as error:
                raise ImportError(
                    "StoreConfig.local_index='hnsw' needs the hnswlib package (pip install hnswlib); "
                    "use local_index=None to search with Chroma, or 'exact' for small stores."
                ) from error
            self._index = hnswlib.Index(space=space, dim=self.dimension)
            self._index.init_index(max_elements=1024, ef_construction=ef_construction, M=max_neighbors)
            self._index.set_ef(ef_search)
        else:
            self._chunks: list[np.ndarray] = []
            self._matrix = np.zeros((0, self.dimension), dtype=np.float32)
            self._norms = np.zeros(0, dtype=np.float32)

    def __len__(self) -> int:
        """Live records (deleted ones excluded)."""
        return len(self.ids) - len(self.deleted)

    def __contains__(self, record_id: str) -> bool:
        label = self.label_of.get(record_id)
        return label is not None and label not in self.deleted

    def add(self, ids: Sequence[str], vectors: np.ndarray) -> int:
        """Add the records not already present; returns how many were added."""
        vectors = np.asarray(vectors, dtype=np.float32)
        keep = [i for i, record_id in enumerate(ids) if record_id not in self]
        if not keep:
            return 0
        labels, first_new = [], len(self.ids)
        for i in keep:
            label = self.label_of.get(ids[i])
            if label is None:
                label = len(self.ids)
                self.ids.append(ids[i])
                self.label_of[ids[i]] = label
            labels.append(label)
        rows = vectors[keep]
        if self.kind == "hnsw":
            revived = [label for label in labels if label in self.deleted]
            for label in revived:  # a record deleted then added again: its old vector is replaced
                self._index.unmark_deleted(label)
                self.deleted.discard(label)
            needed = len(self.ids)
            if needed > self._index.get_max_elements():
                self._index.resize_index(max(needed, 2 * self._index.get_max_elements()))
            self._index.add_items(rows, np.asarray(labels, dtype=np.int64), replace_deleted=False)
        else:
            fresh = [j for j, label in enumerate(labels) if label >= first_new]
            for j, label in enumerate(labels):
                if label < first_new:  # deleted, now added again: overwrite in place
                    self._flush()
                    self._matrix[label] = rows[j]
                    self._norms[label] = np.linalg.norm(rows[j])
                    self.deleted.discard(label)
            if fresh:
                self._chunks.append(rows[fresh])
        return len(keep)

    def remove(self, ids: Sequence[str]) -> None:
        """Forget records (Chroma no longer has them)."""
        for record_id in ids:
            label = self.label_of.get(record_id)
            if label is None or label in self.deleted:
                continue
            self.deleted.add(label)
            if self.kind == "hnsw":
                self._index.mark_deleted(label)

    def knn(self, queries: np.ndarray, k: int) -> tuple[list[list[str]], list[list[float]]] | None:
        """Ids and distances of the ``k`` nearest records per query, nearest first; ``None`` when the
        index cannot answer (the caller then asks Chroma)."""
        queries = np.asarray(queries, dtype=np.float32)
        k = min(int(k), len(self))
        if k == 0:
            return [[] for _ in queries], [[] for _ in queries]
        if self.kind == "hnsw":
            try:
                labels, distances = self._index.knn_query(queries, k=k)
            except RuntimeError:  # too few reachable neighbours (many deletions, tiny graph)
                return None
        else:
            labels, distances = self._exact(queries, k)
        ids = self.ids
        return [[ids[label] for label in row] for row in labels.tolist()], distances.tolist()

    # ------------------------------------------------------------------ exact search

    def _flush(self) -> None:
        if self._chunks:
            new = np.concatenate(self._chunks)
            self._matrix = np.concatenate([self._matrix, new])
            self._norms = np.concatenate([self._norms, np.linalg.norm(new, axis=1).astype(np.float32)])
            self._chunks = []

    def _exact(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        self._flush()
        dots = queries @ self._matrix.T
        if self.space == "cosine":
            scale = np.linalg.norm(queries, axis=1, keepdims=True) * self._norms[None, :]
            distances = 1.0 - dots / np.maximum(scale, 1e-12)
        elif self.space == "ip":
            distances = 1.0 - dots
        else:  # Chroma's l2 is the squared distance
            distances = (queries**2).sum(axis=1, keepdims=True) + self._norms[None, :] ** 2 - 2.0 * dots
        if self.deleted:
            distances[:, sorted(self.deleted)] = np.inf
        nearest = np.argpartition(distances, k - 1, axis=1)[:, :k]
        order = np.take_along_axis(distances, nearest, axis=1).argsort(axis=1, kind="stable")
        labels = np.take_along_axis(nearest, order, axis=1)
        return labels, np.take_along_axis(distances, labels, axis=1)


# ---------------------------------------------------------------------- a store's index

def build_local_index(store) -> int:
    """Build ``store``'s index of ``config.local_index`` from the collection's stored vectors, filling its reward map;
    returns the number of records indexed (``TraceStore.build_local_index``)."""
    config = store.config
    if config.local_index is None:
        raise ValueError("This store has no local index: set StoreConfig(local_index='hnsw' or 'exact').")
    index = LocalIndex(config.local_index, store.embedder.dimension, config.hnsw_space, config.hnsw_ef_construction,
                       config.hnsw_ef_search, config.hnsw_max_neighbors)
    for page in store.iter_batches(include=("embeddings", "metadatas")):
        index.add(page["ids"], page["embeddings"])
        store._remember_rewards(page["ids"], page["metadatas"])
    store._local = index
    if store.collection.count() != len(index):  # written to while we read: catch up
        sync_local_index(store)
    store._local_checked = time.monotonic()
    return len(index)


def sync_local_index(store) -> None:
    """Make ``store``'s index hold exactly the collection's records (``TraceStore.sync_local_index``)."""
    if store._local is None:
        build_local_index(store)
        return
    stored = set()
    for page in store.iter_batches(include=()):
        stored.update(page["ids"])
    local = store._local
    local.remove([record_id for record_id in local.label_of if record_id not in stored])
    missing = [record_id for record_id in stored if record_id not in local]
    size = store.config.read_batch_size
    for start in range(0, len(missing), size):
        page = store.collection.get(ids=missing[start : start + size], include=["embeddings", "metadatas"])
        local.add(page["ids"], page["embeddings"])
        store._remember_rewards(page["ids"], page["metadatas"])
