"""The candidates of each query ``TraceStore.select`` ranks: its top k nearest keys, as ids and distances (nearest
first), found among its question's records when it names a question the store holds (a Chroma ``where``), else among
all records, by the optional in-process index (``local_index.py``) or by Chroma.

Keys as near as the k-th are candidates too (trajectories that begin alike share their first keys): which of several
equally near keys a search returns first is its own accident, Chroma's HNSW and the local index answering
differently, so keeping k of them would retrieve one reward or another by chance."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from rapo_trl.store.local_index import build_local_index, sync_local_index


def nearest_with_ties(search: Callable[[np.ndarray, int], tuple[list, list]], vectors: np.ndarray, top_k: int):
    """``(id_rows, distance_rows)``: each query's ``top_k`` nearest of ``search(vectors, n)`` (the ``n`` nearest, nearest
    first) and every further one as near as the k-th, asking again with a larger ``n`` while they run past what was
    returned; records at one distance in id order."""
    n = top_k + 1
    id_rows, distance_rows = (list(rows) for rows in search(vectors, n))
    pending = [row for row, distances in enumerate(distance_rows) if _tie_runs_past(distances, top_k, n)]
    while pending:
        n *= 2
        for row, ids, distances in zip(pending, *search(vectors[pending], n), strict=True):
            id_rows[row], distance_rows[row] = ids, distances
        pending = [row for row in pending if _tie_runs_past(distance_rows[row], top_k, n)]
    for row, (ids, distances) in enumerate(zip(id_rows, distance_rows, strict=True)):
        keep = len(distances) if len(distances) <= top_k else sum(d <= distances[top_k - 1] for d in distances)
        ranked = sorted(zip(distances, ids, strict=True))[:keep]
        id_rows[row], distance_rows[row] = [i for _, i in ranked], [d for d, _ in ranked]
    return id_rows, distance_rows


def _tie_runs_past(distances, top_k: int, n: int) -> bool:
    """Whether the last of ``n`` returned neighbours is as near as the k-th: more may be, past them."""
    return len(distances) == n and distances[-1] <= distances[top_k - 1]


class Neighbours:
    """TraceStore's neighbour search; needs ``collection``, ``config``, ``_local`` and ``_local_checked`` on the
    store."""

    def _neighbours(self, vectors: np.ndarray, top_k: int, question_ids: Sequence[str | None] | None):
        """``(id_rows, distance_rows)``: each query's ``top_k`` nearest records (and any as near as the k-th), its
        question's where it has one."""
        id_rows, distance_rows = self._own_question_neighbours(vectors, top_k, question_ids or [None] * len(vectors))
        rest = [row for row, ids in enumerate(id_rows) if ids is None]
        if rest:
            found = nearest_with_ties(self._search_all, vectors[rest], top_k)
            for row, ids, distances in zip(rest, *found, strict=True):
                id_rows[row], distance_rows[row] = ids, distances
        return id_rows, distance_rows

    def _search_all(self, vectors: np.ndarray, n: int):
        """The ``n`` nearest records of each query among all: the local index's, else Chroma's."""
        found = self._local_knn(vectors, n) if self.config.local_index else None
        if found is None:
            result = self.collection.query(query_embeddings=vectors, n_results=n, include=["distances"])
            found = result["ids"], result["distances"]
        return found

    def _own_question_neighbours(self, vectors: np.ndarray, top_k: int, question_ids: Sequence[str | None]):
        """``(ids, distances)`` per query among its question's records (a Chroma ``where`` on ``question_id``, the
        local index bypassed); ``None`` for a query without a question id or whose question the store lacks."""
        id_rows: list = [None] * len(vectors)
        distance_rows: list = [None] * len(vectors)
        by_question: dict[str, list[int]] = {}
        for row, question in enumerate(question_ids):
            if question is not None:
                by_question.setdefault(str(question), []).append(row)
        for question, rows in by_question.items():
            def search(queries, n, question=question):
                result = self.collection.query(query_embeddings=queries, n_results=n, where={"question_id": question},
                                               include=["distances"])
                return result["ids"], result["distances"]

            for row, ids, distances in zip(rows, *nearest_with_ties(search, vectors[rows], top_k), strict=True):
                if ids:
                    id_rows[row], distance_rows[row] = ids, distances
        return id_rows, distance_rows

    def _local_knn(self, vectors: np.ndarray, n: int):
        if self._local is None:
            self.build_local_index()
        elif time.monotonic() - self._local_checked >= self.config.local_index_sync_s:
            # count() costs about as much as a search at 170k records: not on every select
            if self.collection.count() != len(self._local):
                self.sync_local_index()
            self._local_checked = time.monotonic()
        return self._local.knn(vectors, n)

    def build_local_index(self) -> int:
        """Build the in-process index of ``config.local_index`` from the collection's stored vectors
        now (else it is built on the first :meth:`select`); also fills the reward map. Returns the
        number of records indexed."""
        return build_local_index(self)

    def sync_local_index(self) -> None:
        """Make the in-process index hold exactly the collection's records (after another writer
        added or deleted some). :meth:`select` calls it when the record counts differ, checked at
        most every ``config.local_index_sync_s`` seconds."""
        sync_local_index(self)
