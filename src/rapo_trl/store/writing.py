"""Writing to a trace store: tagged trajectories cut into step records (``ingest.py``, ``steps.py``), the policy's
best completions during training, records written in question-aligned batches (each id once: a resumed build writes
nothing twice), and deletion. Every write takes the embedded store's exclusive lock first (``lock.py``); within the
process, one writer thread at a time."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import numpy as np

from rapo_trl.store.ingest import is_finite, question_aligned_batches, validate_trajectories
from rapo_trl.store.ingest import keep_top_k as top_k_per_question
from rapo_trl.store.retry import clean_text
from rapo_trl.store.selection import Written
from rapo_trl.store.steps import StepRecord, prompt_text, step_records
from rapo_trl.store.tool_tags import checked_tags, record_tool_tags, store_tool_tags

logger = logging.getLogger(__name__)


class Writing:
    """TraceStore's writes; needs ``collection``, ``config``, ``embedder``, ``acquire_write_lock``, ``_embed``,
    ``_write_lock``, ``_rewards`` and ``_local`` on the store."""

    def add_trajectories(
        self,
        trajectories: Sequence[str],
        rewards: Sequence[float],
        question_ids: Sequence[str],
        source: str = "offline",
        keep_top_k: int | None = 5,
        prompts: Sequence | None = None,
        on_invalid: str = "raise",
        metadata: dict | None = None,
        tool_tags: Sequence[str] | None = None,
    ) -> int:
        """Split tagged trajectories into steps and store them; returns the number of records added.

        Per question only the ``keep_top_k`` best distinct trajectories by reward are kept (``None``:
        all). ``prompts`` (question text or chat messages, one per trajectory) prefix every key; the
        system prompt is dropped. Every row is validated before anything is written; with
        ``on_invalid="skip"`` bad rows are skipped instead of raising. ``metadata`` (scalars) is added to
        every new record's metadata (names an export fills itself, such as ``id`` and ``key``, are refused).
        ``tool_tags`` (the tools the trajectories call, each call a step, as the trainer retrieves after each) are
        added to the store's :attr:`tool_tags` (``None``: the store's own).
        """
        tags = self.tool_tags if tool_tags is None else checked_tags((*self.tool_tags, *tool_tags))
        texts = None if prompts is None else [clean_text(prompt_text(prompt)) for prompt in prompts]
        # Lone surrogates (text decoded with surrogateescape) cannot be stored: replaced, not raised on.
        trajectories = [clean_text(text) if isinstance(text, str) else text for text in trajectories]
        rows, _ = validate_trajectories(trajectories, rewards, question_ids, texts, on_invalid)
        if texts is None and rows:
            # Not an error (a trajectory may be all its key needs), but no question text goes into any key: every
            # question's first step gets the same empty key, so a first retrieval picks among unrelated questions.
            logger.warning(
                "Storing %d trajectories without their prompts: each key is only the steps before it, with no question "
                "text, and every first step gets the same empty key (any question's context retrieves any question's "
                "first step). Give prompts= (add_from_dataset: a 'prompt' or 'question' column, or prompt_column=).",
                len(rows))
        created_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        config = self.config
        records = [record for row in top_k_per_question(rows, keep_top_k)
                   for record in step_records(row.text, row.reward, row.question_id, row.question, source,
                                              config.key_max_chars, config.system_prompt, created_at, tags)]
        added = self.add_records(records, extra_metadata=None if metadata is None else [metadata] * len(records))
        if tool_tags is not None:
            record_tool_tags(self.collection, tags, self._stored_metadata())
        return added

    @property
    def tool_tags(self) -> tuple[str, ...]:
        """The tools whose calls this store's steps end at: recorded in the collection, else python and search."""
        return store_tool_tags(self.collection, self._stored_metadata())

    def _stored_metadata(self) -> dict:
        """The collection's metadata as stored now, not as this object opened it: another client of a server store
        may have recorded tool tags since (this object's copy is used when the collection cannot be read again)."""
        client = getattr(self, "client", None)
        if client is not None:
            try:
                return client.get_collection(name=self.collection_name, embedding_function=None).metadata or {}
            except Exception:  # noqa: BLE001 - closed, unreachable: the copy below says so or answers
                pass
        return self.collection.metadata or {}

    def add_policy_trajectories(
        self,
        prompts: Sequence,
        completions: Sequence[str],
        rewards: Sequence[float],
        question_ids: Sequence[str],
        min_reward: float = 0.0,
        keep_top_k: int = 1,
        source: str = "policy",
        metadata: dict | None = None,
        tool_tags: Sequence[str] | None = None,
    ) -> int:
        """Online growth (beyond the paper; the trainer calls it only when enabled): store the policy's
        best completions per question whose reward is above ``min_reward``. Malformed completions
        are skipped, never raised on, so a training step cannot fail here. ``metadata`` and ``tool_tags``: as for
        :meth:`add_trajectories` (the trainer tags the run and step that grew each record, and names the tools its
        rollouts call, so a grown record is one step per call)."""
        keep = [i for i, reward in enumerate(rewards) if is_finite(reward) and float(reward) > min_reward]
        if not keep:
            return 0
        return self.add_trajectories([completions[i] for i in keep], [rewards[i] for i in keep],
                                     [question_ids[i] for i in keep], source=source, keep_top_k=keep_top_k,
                                     prompts=[prompts[i] for i in keep], on_invalid="skip", metadata=metadata,
                                     tool_tags=tool_tags)

    def delete(self, where: dict) -> int:
        """Delete the records whose metadata match the Chroma filter ``where``; returns how many."""
        self.acquire_write_lock()
        with self._write_lock:
            ids = self.collection.get(where=where, include=[])["ids"]
            if ids:
                self.collection.delete(ids=ids)
                for record_id in ids:
                    self._rewards.pop(record_id, None)
                if self._local is not None:
                    self._local.remove(ids)
        return len(ids)

    def add_records(self, records: Sequence[StepRecord], embeddings: np.ndarray | None = None,
                    show_progress: bool | None = None, extra_metadata: Sequence[dict] | None = None) -> int:
        """Embed and write step records in batches, skipping ids already stored; returns how many
        were added. ``embeddings`` (one row per record) skips embedding."""
        return self.add_records_timed(records, embeddings, show_progress, extra_metadata).added

    def add_records_timed(self, records: Sequence[StepRecord], embeddings: np.ndarray | None = None,
                          show_progress: bool | None = None, extra_metadata: Sequence[dict] | None = None) -> Written:
        """:meth:`add_records`, with the seconds spent checking, embedding and indexing."""
        from tqdm.auto import tqdm

        from rapo_trl.store.dataset_io import check_extra_metadata

        if extra_metadata is not None:
            check_extra_metadata(extra_metadata)
        if embeddings is not None:
            embeddings = np.asarray(embeddings, dtype=np.float32)
            if embeddings.shape != (len(records), self.embedder.dimension):
                raise ValueError(
                    f"Got embeddings of shape {embeddings.shape} for {len(records)} records; the store's "
                    f"embedder {self.embedder.name!r} has dimension {self.embedder.dimension}."
                )
        show = self.config.show_progress if show_progress is None else show_progress
        timing = {"check_s": 0.0, "embed_s": 0.0, "index_s": 0.0}
        added = 0
        if not records:
            return Written(0, **timing)
        # After the empty case: a server store answers the limit over the network, which may be down.
        batches = list(question_aligned_batches(records, self.config.write_batch_size,
                                                self.client.get_max_batch_size()))
        self.acquire_write_lock()
        # One writer thread at a time: the existence check and the add must not interleave, or two
        # threads both count the same new records (Chroma ignores the second add of an id).
        with self._write_lock, tqdm(
            total=len(records), desc="Storing steps", unit="rec", disable=not show or len(batches) < 2
        ) as bar:
            for start, stop in batches:
                added += self._write_batch(records, start, stop, embeddings, extra_metadata, timing)
                bar.update(stop - start)
        return Written(added, **timing)

    def _write_batch(self, records, start, stop, embeddings, extra_metadata, timing) -> int:
        clock = time.perf_counter()
        batch_ids = [record.record_id for record in records[start:stop]]
        existing = set(self.collection.get(ids=batch_ids, include=[])["ids"])
        positions, seen = [], set(existing)
        for position in range(start, stop):
            if records[position].record_id not in seen:
                seen.add(records[position].record_id)
                positions.append(position)
        timing["check_s"] += time.perf_counter() - clock
        if not positions:
            return 0
        chosen = [records[position] for position in positions]
        clock = time.perf_counter()
        if embeddings is None:
            vectors = self._embed([record.key for record in chosen])
        else:
            vectors = embeddings[positions]
        timing["embed_s"] += time.perf_counter() - clock
        metadatas = [self._metadata(record) for record in chosen]
        if extra_metadata is not None:
            for metadata, position in zip(metadatas, positions, strict=True):
                metadata.update({k: v for k, v in extra_metadata[position].items() if k not in metadata})
        clock = time.perf_counter()
        self.collection.add(
            ids=[record.record_id for record in chosen],
            embeddings=vectors,
            documents=[record.key for record in chosen],
            metadatas=metadatas,
        )
        self._rewards.update((record.record_id, float(record.reward)) for record in chosen)
        if self._local is not None:
            self._local.add([record.record_id for record in chosen], vectors)
        timing["index_s"] += time.perf_counter() - clock
        return len(chosen)

    def _metadata(self, record: StepRecord) -> dict:
        return {
            "value": record.value,
            "reward": record.reward,
            "question_id": record.question_id,
            "step_index": record.step_index,
            "num_steps": record.num_steps,
            "source": record.source,
            "trajectory_id": record.trajectory_id,
            "created_at": record.created_at,
            "embedder": self.embedder.name,
        }
