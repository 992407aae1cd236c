"""TraceStore: RAPO's step-trace buffer as a Chroma collection.

Each record is one agent step: the document is its key (the preprocessed context before the step,
which is what gets embedded), the metadata carries the step text (``value``), the trajectory's reward
and provenance. Ids are deterministic, so adding the same trajectories again (a resumed build) stores
nothing twice and embeds nothing twice.

This module opens a store (a folder, a ``chroma run`` server, a dataset, the Hub), holds its folder lock and closes
it. The rest of the class is one mixin per concern:

- ``retrieval.py``: ``select``, down to the rule (``selection.pick``);
- ``neighbours.py``: each query's top k nearest keys (its question's records, the local index or Chroma);
- ``reward_map.py``: the rewards the rule reads, kept in memory and confirmed against Chroma; ``check``;
- ``writing.py``: adding trajectories and records, deleting;
- ``import_export.py``: filling from a dataset or an agent, exporting (SFT examples too), paging through every
  record, ``stats``.
"""

from __future__ import annotations

import threading
import weakref
from pathlib import Path

import numpy as np

from rapo_trl.embeddings import embed_newest, resolve_embedder
from rapo_trl.store import lock as store_lock
from rapo_trl.store.backend import (
    ClosedCollection,
    close_embedded,
    index_space,
    key_settings,
    open_collection,
    open_http_client,
    open_persistent_client,
    prepare_store_dir,
    require_collection,
    require_database,
)
from rapo_trl.store.config import StoreConfig
from rapo_trl.store.import_export import ImportExport
from rapo_trl.store.local_index import LocalIndex
from rapo_trl.store.neighbours import Neighbours
from rapo_trl.store.retrieval import Retrieval
from rapo_trl.store.reward_map import RewardMap
from rapo_trl.store.writing import Writing


class TraceStore(Retrieval, Neighbours, RewardMap, Writing, ImportExport):
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
        if must_exist and not path.is_file():  # a file is prepare_store_dir's to name
            require_database(path, collection)
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

    @classmethod
    def from_dataset(
        cls, ds, path, collection: str = "traces", embedder=None, config: StoreConfig | None = None, *,
        origin: str | None = None,
    ) -> TraceStore:
        """A new (or resumed) store at ``path`` holding the records of an exported dataset. ``origin``: where the
        records came from, named in errors (default: the dataset's files)."""
        from rapo_trl.store.dataset_io import add_records_from_dataset, config_for_records

        store = cls(path, collection=collection, embedder=embedder, config=config_for_records(ds, config))
        add_records_from_dataset(store, ds, origin)
        return store

    @classmethod
    def from_hub(cls, repo_id, path, collection: str = "traces", embedder=None, config: StoreConfig | None = None,
                 revision: str | None = None, token=None) -> TraceStore:
        """A local store at ``path`` from a pushed store's dataset repo (or an exported folder); stored vectors
        are reused when ``embedder`` is the one that made them, otherwise the keys are embedded again."""
        from rapo_trl.store.dataset_io import load_records

        origin = str(repo_id) if revision is None else f"{repo_id} at revision {revision}"
        return cls.from_dataset(load_records(repo_id, revision, token), path, collection, embedder, config,
                                origin=origin)

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
        where = f"collection {collection!r} at {location}"
        self.config = index_space(self.collection, key_settings(self.collection.metadata or {}, self.config, where), where)
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
