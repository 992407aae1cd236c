"""TraceStore: RAPO's step-trace buffer as a Chroma collection.

Each record is one agent step: the document is its key (the preprocessed context before the step,
which is what gets embedded), the metadata carries the step text (``value``), the trajectory's reward
and provenance. Ids are deterministic, so adding the same trajectories again (a resumed build) stores
nothing twice and embeds nothing twice.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from rapo_trl.embeddings import embed_newest, resolve_embedder
from rapo_trl.store import lock as store_lock
from rapo_trl.store.backend import (
    ClosedCollection,
    close_embedded,
    open_collection,
    open_http_client,
    open_persistent_client,
    prepare_store_dir,
    require_collection,
)
from rapo_trl.store.config import StoreConfig
from rapo_trl.store.ingest import is_finite, question_aligned_batches, validate_trajectories
from rapo_trl.store.ingest import keep_top_k as top_k_per_question
from rapo_trl.store.integrity import check_store, stored_reward
from rapo_trl.store.local_index import LocalIndex, build_local_index, sync_local_index
from rapo_trl.store.retry import clean_text
from rapo_trl.store.selection import Retrieved, Selection, Written, fallback, pick, retrieved
from rapo_trl.store.steps import StepRecord, preprocess_context, prompt_text, step_records
from rapo_trl.store.tool_tags import checked_tags, record_tool_tags, store_tool_tags


class TraceStore:
    """Step traces in a Chroma collection, retrieved by context similarity (docs/design.md).

    Args:
        path: directory of an embedded Chroma database (created if missing).
        collection: collection name (3-512 characters of ``[a-zA-Z0-9._-]``).
        embedder: an :class:`~rapo_trl.embeddings.Embedder`, a sentence-transformers model or path;
            ``None`` is all-MiniLM-L6-v2. A collection only opens with the embedder that built it.
        config: selection, preprocessing, index and batching settings.
        must_exist: refuse a collection that is not there yet
            (:class:`~rapo_trl.store.errors.MissingCollectionError`, naming the collections there) instead of
            creating it empty: for readers of a built store, where an empty one would retrieve nothing.

    An embedded store (``TraceStore(path)``) belongs to one process at a time for writing: opening
    takes a shared lock on the folder, the first write (or creating it) an exclusive one, kept until
    :meth:`close` or the process ends. Any number of processes may read together; a process that
    would write beside another, or read beside a writer, gets a
    :class:`~rapo_trl.store.errors.StoreLockedError` naming the holder. To share a store between
    processes that write, serve it (``chroma run --path DIR``) and open it with :meth:`connect`.
    """

    def __init__(self, path, collection: str = "traces", embedder=None, config: StoreConfig | None = None,
                 must_exist: bool = False):
        # Absolute: the lock (and Chroma's per-folder client) must not depend on a later chdir.
        path = Path(path).expanduser().absolute()
        # Embedded Chroma is single-process: lock the folder (shared to read; exclusive to write or
        # create) before Chroma touches it. See rapo_trl.store.lock.
        token = object()
        self._write_lock = store_lock.hold(path, token, exclusive=prepare_store_dir(path))
        client = None
        try:
            client = open_persistent_client(path)
            self._init(
                client, collection, embedder, config, str(path),
                before_create=lambda: store_lock.hold(path, token, exclusive=True), must_exist=must_exist,
            )  # fmt: skip
        except BaseException:
            close_embedded(path, token, client)
            raise
        self.path: Path | None = path
        self._lock_token = token
        self._closer = weakref.finalize(self, close_embedded, path, token, client)

    @classmethod
    def connect(
        cls,
        host: str = "127.0.0.1",
        port: int = 8000,
        collection: str = "traces",
        embedder=None,
        config: StoreConfig | None = None,
        ssl: bool = False,
        headers: dict | None = None,
        must_exist: bool = False,
    ) -> TraceStore:
        """A store on a ``chroma run`` server, shared by several processes."""
        store = cls.__new__(cls)
        store._init(
            open_http_client(host, port, ssl, headers), collection, embedder, config, f"{host}:{port}",
            must_exist=must_exist,
        )
        store.path = None
        store._lock_token = None
        store._write_lock = threading.RLock()
        store._closer = None
        return store

    def _init(
        self, client, collection: str, embedder, config: StoreConfig | None, location: str, before_create=None,
        must_exist: bool = False,
    ) -> None:
        if must_exist:  # before the embedder loads: a wrong name is refused at once
            require_collection(client, collection, location)
        self.config = config or StoreConfig()
        self.embedder = resolve_embedder(embedder)
        self.client = client
        self.location = location
        self.collection_name = collection
        self.collection = open_collection(client, collection, self.embedder, self.config, location, before_create)
        self._rewards: dict[str, float] = {}
        """Reward of each record id seen by this object (read on first sight, kept on its writes)."""
        self._local: LocalIndex | None = None
        """The optional in-process k-NN index (``config.local_index``), built on first select."""
        self._local_checked = 0.0

    def __len__(self) -> int:
        return self.collection.count()

    def close(self) -> None:
        """Release this store: its Chroma client and (embedded) its share of the folder lock, so
        another process may write. Reading or writing afterwards raises. Also done at garbage
        collection and, by the kernel, when the process ends."""
        if self._closer is not None:
            self._closer()
        elif self.path is None and hasattr(self.client, "close"):
            self.client.close()
        self.collection = ClosedCollection(self.location)

    def __enter__(self) -> TraceStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def acquire_write_lock(self) -> None:
        """Take the embedded store's exclusive lock now (writes take it anyway), to fail before any
        expensive work when another process has the store open; a server store needs none. Raises
        :class:`~rapo_trl.store.errors.StoreLockedError`, naming the holder."""
        if self.path is not None:
            store_lock.hold(self.path, self._lock_token, exclusive=True)

    def __repr__(self) -> str:
        return f"TraceStore({self.location!r}, collection={self.collection_name!r}, embedder={self.embedder.name!r})"

    def describe(self) -> dict:
        """Which store this is and how much it holds (what a training checkpoint records): its location
        (folder, or ``host:port`` of a server), collection, record count and embedder. Cheap, unlike :meth:`stats`."""
        return {
            "location": self.location,
            "server": self.path is None,
            "collection": self.collection_name,
            "records": len(self),
            "embedder": self.embedder.name,
        }

    # ------------------------------------------------------------------ retrieval

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
        id_rows, distance_rows = self._own_question_neighbours(vectors, top_k, question_ids or [None] * len(vectors))
        rest = [row for row, ids in enumerate(id_rows) if ids is None]
        if rest:
            found = self._local_knn(vectors[rest], top_k) if config.local_index else None
            if found is None:
                result = self.collection.query(query_embeddings=vectors[rest], n_results=top_k, include=["distances"])
                found = result["ids"], result["distances"]
            for row, ids, distances in zip(rest, *found, strict=True):
                id_rows[row], distance_rows[row] = ids, distances
        return self._apply_rule(id_rows, distance_rows, min_reward, fallback_text)

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

    def _apply_rule(self, id_rows, distance_rows, min_reward: float, fallback_text: str) -> list[Retrieved]:
        space = self.config.hnsw_space
        rewards = self._rewards
        fetched: dict[str, dict] = {}  # metadata read from Chroma during this call
        unknown = [i for i in dict.fromkeys(i for row in id_rows for i in row) if i not in rewards]
        if unknown:
            fetched.update(self._fetch_metadata(unknown))
        picks = []
        for ids, distances in zip(id_rows, distance_rows, strict=True):
            known = [(i, d) for i, d in zip(ids, distances, strict=True) if i in rewards]
            picks.append(pick([i for i, _ in known], [rewards[i] for i, _ in known], [d for _, d in known], space,
                              min_reward))
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
            for row in stale:
                pairs = [
                    (i, d) for i, d in zip(id_rows[row], distance_rows[row], strict=True) if i in fetched
                ]
                picks[row] = pick([i for i, _ in pairs], [fetched[i]["reward"] for i, _ in pairs],
                                  [d for _, d in pairs], space, min_reward)
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

    def check(self) -> None:
        """Refuse, with :class:`~rapo_trl.store.errors.CorruptStoreError`, a store that would retrieve wrongly:
        records without a usable reward, a vector index that cannot be searched or misses records. Reads every
        record's reward (filling the reward map); RAPOTrainer runs it before training."""
        check_store(self)

    def load_rewards(self) -> int:
        """Read every record's reward into the reward map now (pages of ``config.read_batch_size``),
        instead of on first sight during :meth:`select`; returns the number of records."""
        self._rewards = {}
        for page in self.iter_batches():
            self._remember_rewards(page["ids"], page["metadatas"])
        return len(self._rewards)

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

    def _remember_rewards(self, ids, metadatas) -> None:
        self._rewards.update(
            (record_id, stored_reward(self, record_id, metadata))
            for record_id, metadata in zip(ids, metadatas, strict=True)
        )

    def forget_rewards(self) -> None:
        """Empty the reward map. Needed only if rewards of stored records are changed outside
        TraceStore (it never rewrites a stored record; records added by others are read on sight)."""
        self._rewards = {}

    # ------------------------------------------------------------------ writing

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
        every new record's metadata. ``tool_tags`` (the tools the trajectories call, each call a step, as the
        trainer retrieves after each) are added to the store's :attr:`tool_tags` (``None``: the store's own).
        """
        tags = self.tool_tags if tool_tags is None else checked_tags((*self.tool_tags, *tool_tags))
        texts = None if prompts is None else [clean_text(prompt_text(prompt)) for prompt in prompts]
        # Lone surrogates (text decoded with surrogateescape) cannot be stored: replaced, not raised on.
        trajectories = [clean_text(text) if isinstance(text, str) else text for text in trajectories]
        rows, _ = validate_trajectories(trajectories, rewards, question_ids, texts, on_invalid)
        created_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        config = self.config
        records = [record for row in top_k_per_question(rows, keep_top_k)
                   for record in step_records(row.text, row.reward, row.question_id, row.question, source,
                                              config.key_max_chars, config.system_prompt, created_at, tags)]
        added = self.add_records(records, extra_metadata=None if metadata is None else [metadata] * len(records))
        if tool_tags is not None:
            record_tool_tags(self.collection, tags)
        return added

    @property
    def tool_tags(self) -> tuple[str, ...]:
        """The tools whose calls this store's steps end at: recorded in the collection, else python and search."""
        return store_tool_tags(self.collection)

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
    ) -> int:
        """Online growth (beyond the paper; the trainer calls it only when enabled): store the policy's
        best completions per question whose reward is above ``min_reward``. Malformed completions
        are skipped, never raised on, so a training step cannot fail here. ``metadata``: as for
        :meth:`add_trajectories` (the trainer tags the run and step that grew each record)."""
        keep = [i for i, reward in enumerate(rewards) if is_finite(reward) and float(reward) > min_reward]
        if not keep:
            return 0
        return self.add_trajectories([completions[i] for i in keep], [rewards[i] for i in keep],
                                     [question_ids[i] for i in keep], source=source, keep_top_k=keep_top_k,
                                     prompts=[prompts[i] for i in keep], on_invalid="skip", metadata=metadata)

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

        if embeddings is not None:
            embeddings = np.asarray(embeddings, dtype=np.float32)
            if embeddings.shape != (len(records), self.embedder.dimension):
                raise ValueError(
                    f"Got embeddings of shape {embeddings.shape} for {len(records)} records; the store's "
                    f"embedder {self.embedder.name!r} has dimension {self.embedder.dimension}."
                )
        batches = list(question_aligned_batches(records, self.config.write_batch_size))
        show = self.config.show_progress if show_progress is None else show_progress
        timing = {"check_s": 0.0, "embed_s": 0.0, "index_s": 0.0}
        added = 0
        if not records:
            return Written(0, **timing)
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

    def _embed(self, texts: list[str]) -> np.ndarray:
        # Keys and queries are contexts: past the embedder's token limit, their newest end is what is embedded.
        vectors = np.asarray(embed_newest(self.embedder, texts), dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape != (len(texts), self.embedder.dimension):
            raise ValueError(
                f"Embedder {self.embedder.name!r} returned vectors of shape {vectors.shape} for {len(texts)} "
                f"texts; the store expects dimension {self.embedder.dimension}."
            )
        if not np.isfinite(vectors).all():
            raise ValueError(f"Embedder {self.embedder.name!r} returned non-finite vectors.")
        return vectors

    # ------------------------------------------------------------------ building

    def add_from_dataset(
        self,
        ds,
        text_column: str = "trajectory",
        reward_column: str = "reward",
        question_column: str = "question_id",
        **kwargs,
    ) -> int:
        """Store a ``datasets.Dataset`` of tagged trajectories; see :func:`~rapo_trl.store.dataset_io.add_from_dataset`."""
        from rapo_trl.store.dataset_io import add_from_dataset

        return add_from_dataset(self, ds, text_column, reward_column, question_column, **kwargs)

    def build_from_agent(
        self, agent, questions, reward_fn, num_samples: int = 16, keep_top_k: int = 5, **kwargs
    ) -> int:
        """Have an off-policy agent solve every question; see :func:`~rapo_trl.store.agent.build_from_agent`."""
        from rapo_trl.store.agent import build_from_agent

        return build_from_agent(self, agent, questions, reward_fn, num_samples, keep_top_k, **kwargs)

    def to_dataset(self, include_embeddings: bool = True):
        """All records as a ``datasets.Dataset`` (one row per step; ``embedding`` column optional)."""
        from rapo_trl.store.dataset_io import to_dataset

        return to_dataset(self, include_embeddings)

    @classmethod
    def from_dataset(
        cls, ds, path, collection: str = "traces", embedder=None, config: StoreConfig | None = None
    ) -> TraceStore:
        """A new (or resumed) store at ``path`` holding the records of an exported dataset."""
        from rapo_trl.store.dataset_io import add_records_from_dataset

        store = cls(path, collection=collection, embedder=embedder, config=config)
        add_records_from_dataset(store, ds)
        return store

    def push_to_hub(self, repo_id: str, private: bool | None = None, token=None, include_embeddings: bool = True,
                    commit_message: str = "Upload RAPO trace store") -> str:
        """Upload every record as a Hub dataset (parquet + a dataset card with records, embedder, source
        agents and reward histogram); returns its URL. ``TraceStore.from_hub`` reads it back."""
        from rapo_trl.store.dataset_io import push_to_hub

        return push_to_hub(self, repo_id, private, token, include_embeddings, commit_message)

    def export_to_folder(self, folder, include_embeddings: bool = True):
        """Write what ``push_to_hub`` uploads (``data/*.parquet`` + ``README.md``) into a local folder."""
        from rapo_trl.store.dataset_io import export_to_folder

        return export_to_folder(self, folder, include_embeddings)

    @classmethod
    def from_hub(cls, repo_id, path, collection: str = "traces", embedder=None, config: StoreConfig | None = None,
                 revision: str | None = None, token=None) -> TraceStore:
        """A local store at ``path`` from a pushed store's dataset repo (or an exported folder); stored vectors
        are reused when ``embedder`` is the one that made them, otherwise the keys are embedded again."""
        from rapo_trl.store.dataset_io import load_records

        return cls.from_dataset(load_records(repo_id, revision, token), path, collection, embedder, config)

    # ------------------------------------------------------------------ inspection

    def iter_batches(self, include: Sequence[str] = ("metadatas",)) -> Iterator[dict]:
        """Every record in pages of ``config.read_batch_size`` (Chroma ``get`` results)."""
        offset = 0
        while True:
            page = self.collection.get(
                include=list(include), limit=self.config.read_batch_size, offset=offset
            )
            if not page["ids"]:
                return
            yield page
            offset += len(page["ids"])

    def stats(self, bins: int = 10) -> dict:
        """Records, questions, trajectories, sources, a reward histogram, the embedder and disk size."""
        from rapo_trl.store.dataset_io import store_stats

        return store_stats(self, bins)
