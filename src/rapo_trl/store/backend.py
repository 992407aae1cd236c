"""Opening (and closing) Chroma: an embedded persistent client or a server client, and our collection with its
embedder check. Chroma never embeds anything here (``embedding_function=None``): its default
function downloads a model and fails offline, so every vector comes from our embedder."""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from pathlib import Path

from rapo_trl.embeddings import without_fingerprint
from rapo_trl.store import lock as store_lock
from rapo_trl.store.config import StoreConfig
from rapo_trl.store.errors import (
    CorruptStoreError,
    EmbedderMismatchError,
    KeySettingsMismatchError,
    MissingCollectionError,
    StaleStoreError,
    StorePathError,
    TraceStoreError,
)

logger = logging.getLogger(__name__)

STORE_FORMAT = 2
"""Bumped whenever stored keys would no longer match the queries made of them. 2: keys and queries past the
embedder's token limit are embedded from their newest end (format 1 embedded their start)."""
_SQLITE_MAGIC = b"SQLite format 3\x00"
DATABASE_FILE = "chroma.sqlite3"
"""The file embedded Chroma keeps a store in, inside the store's folder."""


def _settings():
    from chromadb.config import Settings

    # One Settings value for every client: Chroma refuses two clients of one path with different ones.
    return Settings(anonymized_telemetry=False)


def prepare_store_dir(path: str | os.PathLike) -> bool:
    """Check (and create) an embedded store's directory; True when it holds no database yet."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise StorePathError(f"Trace store path {path} is a file, not a directory.")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise StorePathError(f"Cannot create the trace store directory {path}: {error}") from error
    if not os.access(path, os.W_OK | os.X_OK):
        raise StorePathError(f"Trace store directory {path} is not writable.")
    database = path / DATABASE_FILE
    if database.exists():
        with open(database, "rb") as handle:
            header = handle.read(len(_SQLITE_MAGIC))
        # An empty file is what an interrupted first open leaves; Chroma initialises it.
        if header and header != _SQLITE_MAGIC:
            raise CorruptStoreError(
                f"{database} is not an SQLite database; the trace store at {path} is corrupt. "
                "Left untouched: move it away or point the store at another directory."
            )
        if not os.access(database, os.W_OK):
            raise StorePathError(f"Trace store database {database} is not writable.")
        return not header
    return True


def open_persistent_client(path: str | os.PathLike):
    """An embedded ``chromadb.PersistentClient`` at ``path``, after checking the path is usable."""
    import chromadb

    prepare_store_dir(path)
    try:
        return chromadb.PersistentClient(path=str(path), settings=_settings())
    except Exception as error:  # Chroma raises its own InternalError for a damaged database
        raise CorruptStoreError(
            f"Cannot open the trace store at {path} ({type(error).__name__}: {error}). It may be corrupt "
            "or written by an incompatible Chroma version; it was left untouched."
        ) from error


def open_http_client(host: str, port: int, ssl: bool = False, headers: dict | None = None):
    """A ``chromadb.HttpClient`` to a ``chroma run`` server."""
    import chromadb

    try:
        return chromadb.HttpClient(host=host, port=int(port), ssl=ssl, headers=headers, settings=_settings())
    except Exception as error:
        raise ConnectionError(f"Cannot reach the Chroma server at {host}:{port}: {error}") from error


KEY_SYSTEM_PROMPT = "key_system_prompt"
"""Metadata key of the system prompt a collection's keys were cut of (``StoreConfig.system_prompt``), when one was."""


def collection_metadata(embedder, config: StoreConfig) -> dict:
    """What a new collection records about how its keys were made."""
    return {
        "rapo_store_format": STORE_FORMAT,
        "embedder": embedder.name,
        "dimension": int(embedder.dimension),
        "key_max_chars": int(config.key_max_chars),
        **({KEY_SYSTEM_PROMPT: config.system_prompt} if config.system_prompt else {}),
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def require_database(path: Path, collection: str) -> None:
    """Refuse a folder that holds no store database (:class:`MissingCollectionError`) before anything is made in it,
    so that a reader pointed at the wrong folder leaves neither a database nor a lock file there."""
    if not (path / DATABASE_FILE).is_file():
        there = "the folder does not exist" if not path.exists() else f"it holds no {DATABASE_FILE}"
        raise MissingCollectionError(
            f"The trace store at {path} has no collection {collection!r} ({there}). Build it with `rapo build-store`, "
            f"or give the folder a build wrote.")


def require_collection(client, name: str, where: str) -> None:
    """Refuse a missing collection ``name`` (:class:`MissingCollectionError`, naming those there) before anything
    loads or creates it: a reader that expects a built store would otherwise get an empty one and retrieve nothing."""
    from chromadb.errors import NotFoundError

    try:
        client.get_collection(name=name, embedding_function=None)
    except NotFoundError:
        try:
            names = collection_names(client)
        except Exception:  # noqa: BLE001 - the message names what it can
            names = None
        there = ("it holds no collection" if names == [] else f"its collections: {', '.join(names)}" if names
                 else "its collections could not be listed")
        raise MissingCollectionError(
            f"The trace store at {where} has no collection {name!r} ({there}). Check store_collection, or build it "
            f"with `rapo build-store --store_collection {name}`.") from None
    except Exception:  # noqa: BLE001 - e.g. an invalid name: opening it says so clearly
        pass


def open_collection(client, name: str, embedder, config: StoreConfig, where: str, before_create=None):
    """Get or create collection ``name`` and refuse it if another embedder built it.

    ``before_create`` is called first when the collection does not exist yet (creating is a write).
    """
    if before_create is not None:
        from chromadb.errors import NotFoundError

        try:
            client.get_collection(name=name, embedding_function=None)
        except NotFoundError:
            before_create()
        except Exception:  # noqa: BLE001 - e.g. an invalid name: get_or_create below says so clearly
            pass
    try:
        collection = client.get_or_create_collection(
            name=name,
            metadata=collection_metadata(embedder, config),
            configuration=config.hnsw_configuration(),
            embedding_function=None,
        )
    except Exception as error:
        if "Expected a name" in str(error):
            raise ValueError(f"Invalid trace store collection name {name!r}: {error}") from error
        raise
    check_embedder(collection.metadata or {}, embedder, f"collection {name!r} at {where}")
    check_format(collection.metadata or {}, f"collection {name!r} at {where}")
    return collection


def key_settings(metadata: dict, config: StoreConfig, where: str) -> StoreConfig:
    """``config`` cutting queries as the collection's keys were cut: to the recorded key length, and with the
    recorded ``system_prompt`` cut out. An unset (default) setting takes the recorded one; another one asked for
    explicitly is refused (:class:`KeySettingsMismatchError`). A collection that recorded no system prompt takes
    the one given: cutting a text its keys never held changes no key."""
    recorded = metadata.get("key_max_chars")
    if recorded is not None and int(recorded) != config.key_max_chars:
        if config.key_max_chars != StoreConfig.key_max_chars:
            raise KeySettingsMismatchError(
                f"The {where} cut its keys to their last {int(recorded)} characters, but StoreConfig(key_max_chars="
                f"{config.key_max_chars}) was given: queries cut otherwise would not match its keys. Open it with "
                f"key_max_chars={int(recorded)} (or leave it unset), or build a new collection.")
        config = dataclasses.replace(config, key_max_chars=int(recorded))
    cut = metadata.get(KEY_SYSTEM_PROMPT)
    if cut and config.system_prompt != cut:
        if config.system_prompt is not None:
            raise KeySettingsMismatchError(
                f"The {where} cut the system prompt {cut[:40]!r}... out of its keys, but StoreConfig(system_prompt="
                f"{config.system_prompt[:40]!r}...) was given: queries cut otherwise would not match its keys. Leave "
                "system_prompt unset to cut the recorded one, or build a new collection.")
        config = dataclasses.replace(config, system_prompt=cut)
    return config


def index_space(collection, config: StoreConfig, where: str) -> StoreConfig:
    """``config`` reading distances in the space Chroma built the collection's index with (fixed at creation, whatever
    a later open asks for): the default (cosine) takes the recorded space; another one asked for explicitly is refused
    (:class:`KeySettingsMismatchError`). Read in another space, every retrieval's similarity would be wrong."""
    recorded = ((getattr(collection, "configuration", None) or {}).get("hnsw") or {}).get("space")
    if recorded is None or recorded == config.hnsw_space:
        return config
    if config.hnsw_space != StoreConfig.hnsw_space:
        raise KeySettingsMismatchError(
            f"The {where} has an index of {recorded!r} distances, but StoreConfig(hnsw_space={config.hnsw_space!r}) "
            f"was given: Chroma keeps the space a collection was created with. Open it with hnsw_space={recorded!r} "
            "(or leave it unset), or build a new collection.")
    return dataclasses.replace(config, hnsw_space=recorded)


def check_format(metadata: dict, where: str) -> None:
    """Raise :class:`StaleStoreError` unless ``metadata`` records this package's store format: a store of another
    format answers queries, but with keys embedded differently, so its retrieval would be silently wrong."""
    found = metadata.get("rapo_store_format")
    if found == STORE_FORMAT:
        return
    why = ("it was built before keys were embedded from their newest end" if found in (None, 1)
           else "a newer rapo_trl built it")
    raise StaleStoreError(
        f"The {where} has store format {found or 1}, this rapo_trl reads format {STORE_FORMAT}: {why}, so its keys "
        "would not match the queries made of them. Rebuild it into a new folder or collection (`rapo build-store "
        "--store_path NEW`), or use the rapo_trl that built it."
    )


def check_embedder(metadata: dict, embedder, where: str) -> None:
    """Raise :class:`EmbedderMismatchError` unless ``metadata`` records this embedder and dimension."""
    if "embedder" not in metadata or "dimension" not in metadata:
        raise EmbedderMismatchError(
            f"The {where} was not created by a rapo_trl TraceStore (no embedder recorded in its metadata)."
        )
    stored = (metadata["embedder"], int(metadata["dimension"]))
    given = (embedder.name, int(embedder.dimension))
    if stored == given:
        return
    if _recorded_by_folder_name(stored, given):
        logger.warning("The %s records embedder %r by its folder's name alone (built before a local model's files were "
                       "fingerprinted), so it cannot tell whether %r is the model that built it; opened by name. "
                       "Rebuild the store to have its embedder checked.", where, stored[0], given[0])
        return
    raise EmbedderMismatchError(
        f"The {where} was built with embedder {stored[0]!r} (dimension {stored[1]}), but "
        f"embedder {given[0]!r} (dimension {given[1]}) was given. Open it with the same embedder, "
        "or build a new collection.",
        stored=stored,
    )


def _recorded_by_folder_name(stored: tuple[str, int], given: tuple[str, int]) -> bool:
    """Whether ``stored`` names the ``given`` local folder's embedder as stores did before its fingerprint was
    recorded: same folder name (and token-limit suffix), same dimension. Accepted as before, for those stores to open."""
    return stored == (without_fingerprint(given[0]), given[1])


class ClosedCollection:
    """Stands in for the collection of a closed store: any use says so (not a Chroma internal error)."""

    def __init__(self, location: str):
        self._location = location

    def __getattr__(self, name):
        raise TraceStoreError(f"The trace store at {self._location} was closed; open it again to use it.")


def close_embedded(path: Path, token: object, client) -> None:
    """Close an embedded store's Chroma client, then drop its share of the folder lock (in that
    order: once the lock is gone another process may write, and a cached client would be stale)."""
    try:
        if client is not None:
            client.close()
    finally:
        store_lock.release(path, token)


def collection_names(client) -> list[str]:
    """The names of the collections the client's database holds, sorted."""
    return sorted(getattr(collection, "name", collection) for collection in client.list_collections())


def directory_size(path: Path) -> int:
    """Bytes under an embedded store's folder: its database (shared by every collection in the folder), each
    collection's index and any other file there."""
    return sum(
        os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names
    )
