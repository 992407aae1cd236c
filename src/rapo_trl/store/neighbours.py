"""The candidates of each query ``TraceStore.select`` ranks: its top k nearest keys, as ids and distances (nearest
first), found among its question's records when it names a question the store holds (a Chroma ``where``), else among
all records, by the optional in-process index (``local_index.py``) or by Chroma."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from rapo_trl.store.local_index import build_local_index, sync_local_index


class Neighbours:
    """TraceStore's neighbour search; needs ``collection``, ``config``, ``_local`` and ``_local_checked`` on the
    store."""

    def _neighbours(self, vectors: np.ndarray, top_k: int, question_ids: Sequence[str | None] | None):
        """``(id_rows, distance_rows)``: each query's ``top_k`` nearest records, its question's where it has one."""
        id_rows, distance_rows = self._own_question_neighbours(vectors, top_k, question_ids or [None] * len(vectors))
        rest = [row for row, ids in enumerate(id_rows) if ids is None]
        if rest:
            found = self._local_knn(vectors[rest], top_k) if self.config.local_index else None
            if found is None:
                result = self.collection.query(query_embeddings=vectors[rest], n_results=top_k, include=["distances"])
                found = result["ids"], result["distances"]
            for row, ids, distances in zip(rest, *found, strict=True):
                id_rows[row], distance_rows[row] = ids, distances
        return id_rows, distance_rows

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
            result = self.collection.query(query_embeddings=vectors[rows], n_results=top_k,
                                           where={"question_id": question}, include=["distances"])
            for row, ids, distances in zip(rows, result["ids"], result["distances"], strict=True):
                if ids:
                    id_rows[row], distance_rows[row] = ids, distances
        return id_rows, distance_rows

    def _local_knn(self, vectors: np.ndarray, top_k: int):
        if self._local is None:
            self.build_local_index()
        elif time.monotonic() - self._local_checked >= self.config.local_index_sync_s:
            # count() costs about as much as a search at 170k records: not on every select
            if self.collection.count() != len(self._local):
                self.sync_local_index()
            self._local_checked = time.monotonic()
        return self._local.knn(vectors, top_k)

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
