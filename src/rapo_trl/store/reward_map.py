"""The rewards ``TraceStore.select`` ranks candidates by, kept in memory so that the rule needs no Chroma read for
records this object has seen, and the check that makes a stale entry harmless: every winner is read back from Chroma
and a row whose winner changed or vanished is decided again on what Chroma holds now.

The map (``store._rewards``, record id -> reward) is filled on first sight of a record, by this object's writes, by
:meth:`RewardMap.load_rewards` and ``check`` (all at once) and by the local index as it reads the collection."""

from __future__ import annotations

from collections.abc import Mapping

from rapo_trl.store.integrity import check_store, stored_reward
from rapo_trl.store.selection import Retrieved, fallback, pick, retrieved


def known_candidates(ids, distances, rewards: Mapping) -> tuple[list[str], list, list[float]]:
    """``(ids, rewards, distances)`` of the candidates whose reward ``rewards`` holds, in ``pick``'s argument order: a
    candidate without one is no longer stored."""
    known = [(record_id, distance) for record_id, distance in zip(ids, distances, strict=True) if record_id in rewards]
    return [i for i, _ in known], [rewards[i] for i, _ in known], [d for _, d in known]


class RewardMap:
    """TraceStore's reward map; needs ``collection``, ``config``, ``iter_batches``, ``_rewards`` and ``_local`` on the
    store."""

    def _read_unknown_rewards(self, id_rows) -> dict[str, dict]:
        """Read the candidates missing from the reward map in one Chroma ``get``; returns their metadata by id."""
        unknown = [i for i in dict.fromkeys(i for row in id_rows for i in row) if i not in self._rewards]
        return self._fetch_metadata(unknown) if unknown else {}

    def _confirmed(self, picks, id_rows, distance_rows, fetched: dict[str, dict], min_reward: float,
                   fallback_text: str) -> list[Retrieved]:
        """The retrievals of ``picks`` (one per row of candidates) as Chroma holds them: the winners' metadata read in
        one ``get`` (``fetched``, the metadata already read by this selection, is not read again); a row whose winner
        Chroma no longer has, or whose stored reward differs from the map's, is decided again on fresh data."""
        winners = [i for i in dict.fromkeys(chosen[0] for chosen in picks if chosen) if i not in fetched]
        if winners:
            fetched.update(self._fetch_metadata(winners))
        stale = [
            row
            for row, chosen in enumerate(picks)
            if chosen and (chosen[0] not in fetched or float(fetched[chosen[0]]["reward"]) != chosen[1])
        ]
        if stale:  # changed or deleted behind this process's back: decide these rows on fresh data
            again = [i for i in dict.fromkeys(i for row in stale for i in id_rows[row]) if i not in fetched]
            if again:
                fetched.update(self._fetch_metadata(again))
            fresh = {record_id: metadata["reward"] for record_id, metadata in fetched.items()}
            for row in stale:
                candidates = known_candidates(id_rows[row], distance_rows[row], fresh)
                picks[row] = pick(*candidates, self.config.hnsw_space, min_reward)
        return [
            fallback(fallback_text)
            if chosen is None
            else retrieved(chosen[0], fetched[chosen[0]], chosen[1], chosen[2])
            for chosen in picks
        ]

    def _fetch_metadata(self, ids: list[str]) -> dict[str, dict]:
        """Metadata of ``ids`` in one Chroma ``get``; refreshes their entries in the reward map."""
        page = self.collection.get(ids=ids, include=["metadatas"])
        found = dict(zip(page["ids"], page["metadatas"], strict=True))
        gone = []
        for record_id in ids:
            if record_id in found:
                self._rewards[record_id] = stored_reward(self, record_id, found[record_id])
            else:
                self._rewards.pop(record_id, None)
                gone.append(record_id)
        if gone and self._local is not None:
            self._local.remove(gone)
        return found

    def _remember_rewards(self, ids, metadatas) -> None:
        self._rewards.update(
            (record_id, stored_reward(self, record_id, metadata))
            for record_id, metadata in zip(ids, metadatas, strict=True)
        )

    def load_rewards(self) -> int:
        """Read every record's reward into the reward map now (pages of ``config.read_batch_size``),
        instead of on first sight during :meth:`select`; returns the number of records."""
        self._rewards = {}
        for page in self.iter_batches():
            self._remember_rewards(page["ids"], page["metadatas"])
        return len(self._rewards)

    def best_reward(self) -> float | None:
        """The highest reward among the stored records (None for an empty store); reads every record's reward
        unless the reward map already holds them all (after :meth:`check` or :meth:`load_rewards`)."""
        if len(self._rewards) < len(self):
            self.load_rewards()
        return max(self._rewards.values(), default=None)

    def forget_rewards(self) -> None:
        """Empty the reward map. Needed only if rewards of stored records are changed outside
        TraceStore (it never rewrites a stored record; records added by others are read on sight)."""
        self._rewards = {}

    def check(self) -> None:
        """Refuse, with :class:`~rapo_trl.store.errors.CorruptStoreError`, a store that would retrieve wrongly:
        records without a usable reward, a vector index that cannot be searched or misses records. Reads every
        record's reward (filling the reward map); RAPOTrainer runs it before training."""
        check_store(self)
