"""``TraceStore.select``: which stored step each context retrieves.

The path is three calls deep: ``select`` -> ``select_timed`` (the clock) -> ``select_embedded``, which applies the
rule (``selection.pick``) between what it needs and what checks it:

1. the candidates, each query's top k nearest keys (``neighbours.py``);
2. their rewards, from the in-memory reward map, unknown ones read from Chroma (``reward_map.py``);
3. ``pick`` for each query;
4. each winner confirmed against Chroma, a row whose winner changed or vanished decided again (``reward_map.py``).

Retries and an unreachable store are the caller's (``outage.py`` and ``retry.py``, around ``select``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from rapo_trl.store.retry import clean_text
from rapo_trl.store.reward_map import known_candidates
from rapo_trl.store.selection import Retrieved, Selection, pick
from rapo_trl.store.steps import preprocess_context


class Retrieval:
    """TraceStore's ``select`` family; needs ``config``, ``_embed``, ``_neighbours``, ``_rewards``,
    ``_read_unknown_rewards`` and ``_confirmed`` on the store."""

    def preprocess(self, context: str) -> str:
        """A raw context (prompt + completion so far) as the store's keys are written."""
        return preprocess_context(clean_text(context), self.config.key_max_chars, self.config.system_prompt)

    def select(
        self, contexts: Sequence[str], top_k: int | None = None, min_reward: float | None = None,
        question_ids: Sequence[str | None] | None = None, fallback_text: str | None = None,
    ) -> list[Retrieved]:
        """One retrieval per context: a single embedding call and a single Chroma query for all.

        ``question_ids`` (one per context; ``None`` for none) restricts a context's candidates to the records of its
        question where the store holds any (one Chroma query per question), else it is answered by similarity
        over all records, as without it. ``top_k``, ``min_reward`` and ``fallback_text`` override the store's
        config for this call (``None``: the config's), so a trainer passes its own settings without changing the
        store."""
        return self.select_timed(contexts, top_k, min_reward, question_ids, fallback_text).retrieved

    def select_timed(
        self, contexts: Sequence[str], top_k: int | None = None, min_reward: float | None = None,
        question_ids: Sequence[str | None] | None = None, fallback_text: str | None = None,
    ) -> Selection:
        """:meth:`select`, with the seconds spent embedding and searching."""
        contexts = list(contexts)
        if not contexts:
            return Selection([])
        start = time.perf_counter()
        vectors = self._embed([self.preprocess(context) for context in contexts])
        embed_s, start = time.perf_counter() - start, time.perf_counter()
        retrieved = self.select_embedded(vectors, top_k, min_reward, question_ids, fallback_text)
        return Selection(retrieved, embed_s=embed_s, search_s=time.perf_counter() - start)

    def select_embedded(
        self, vectors: np.ndarray, top_k: int | None = None, min_reward: float | None = None,
        question_ids: Sequence[str | None] | None = None, fallback_text: str | None = None,
    ) -> list[Retrieved]:
        """:meth:`select` for query vectors already embedded by this store's embedder.

        One Chroma query (or, with ``config.local_index``, the in-process index) gives only ids and
        distances; the rule runs on rewards from this object's reward map (records not yet in it are
        read in one ``get``), then one ``get`` fetches the winners' metadata. A winner Chroma no
        longer has, or whose stored reward differs from the map's, makes its row re-read all its
        candidates: what is returned always comes from Chroma.
        """
        config = self.config
        top_k = config.top_k if top_k is None else top_k
        min_reward = config.min_reward if min_reward is None else min_reward
        fallback_text = config.fallback_text if fallback_text is None else fallback_text
        vectors = np.asarray(vectors, dtype=np.float32)
        if question_ids is not None and len(question_ids) != len(vectors):
            raise ValueError(f"select got {len(question_ids)} question ids for {len(vectors)} queries.")
        id_rows, distance_rows = self._neighbours(vectors, top_k, question_ids)
        fetched = self._read_unknown_rewards(id_rows)
        picks = [
            pick(*known_candidates(ids, distances, self._rewards), config.hnsw_space, min_reward)
            for ids, distances in zip(id_rows, distance_rows, strict=True)
        ]
        return self._confirmed(picks, id_rows, distance_rows, fetched, min_reward, fallback_text)
