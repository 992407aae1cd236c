"""``SearchTool``: the policy's ``<search>`` calls, answered with the top-k passages of a local corpus.

Passages are embedded with our own embedder (``rapo_trl.embeddings``; all-MiniLM-L6-v2 by default) and
indexed in an embedded Chroma collection with cosine distance. Vectors are always precomputed
(``embedding_function=None``): Chroma's default embedding function downloads a model and fails
offline. The index lives in memory by default; with ``path`` it is persisted and reused on the next
run when its fingerprint (corpus contents + embedder name and dimension) matches, rebuilt otherwise.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Mapping, Sequence

from ..embeddings import resolve_embedder
from .base import ToolError

logger = logging.getLogger(__name__)

_EMBED_BATCH = 256


def _passages(corpus) -> tuple[list[str], list[str]]:
    """(texts, titles) from a list of strings or of ``{"text", "title"}`` records, or a ``datasets.Dataset`` with
    ``text`` (and ``title``)."""
    if hasattr(corpus, "column_names"):
        if "text" not in corpus.column_names:
            raise ValueError(f"A corpus dataset needs a 'text' column; it has {corpus.column_names}.")
        texts = [str(text) for text in corpus["text"]]
        has_title = "title" in corpus.column_names
        titles = [str(title or "") for title in corpus["title"]] if has_title else [""] * len(texts)
    elif isinstance(corpus, str) or hasattr(corpus, "columns"):  # a DataFrame iterates over its column names
        raise TypeError(f"corpus must be a list of passages or a datasets.Dataset, not a {type(corpus).__name__} "
                        "(Dataset.from_pandas turns a DataFrame into one).")
    else:
        texts, titles = [], []
        for index, item in enumerate(corpus):
            if isinstance(item, Mapping) and "text" in item:
                texts.append(str(item["text"]))
                titles.append(str(item.get("title") or ""))
            elif isinstance(item, str):
                texts.append(item)
                titles.append("")
            else:  # its repr would be searched and shown as the passage
                raise TypeError(f"corpus item {index}: a passage is a string or a record with a 'text' key, "
                                f"got {type(item).__name__} {str(item)[:60]!r}")
    if not texts:
        raise ValueError("The search corpus is empty.")
    return _distinct(texts, titles)


def _distinct(texts: list[str], titles: list[str]) -> tuple[list[str], list[str]]:
    """Each passage once (the same title and words, however spaced, as the result shows them): every copy would
    score alike and take another place of the top-k, showing the policy one passage k times."""
    first = {}
    for index, (title, text) in enumerate(zip(titles, texts)):
        first.setdefault((title, " ".join(text.split())), index)
    if len(first) < len(texts):
        logger.info("Search corpus: %d repeated passage(s) indexed once.", len(texts) - len(first))
        keep = sorted(first.values())
        texts, titles = [texts[i] for i in keep], [titles[i] for i in keep]
    return texts, titles


def corpus_fingerprint(
    texts: Sequence[str], titles: Sequence[str], embedder_name: str, dimension: int
) -> str:
    digest = hashlib.sha256(f"{embedder_name}\0{dimension}\0{len(texts)}\0".encode())
    for title, text in zip(titles, texts):
        digest.update(title.encode() + b"\0" + text.encode() + b"\1")
    return digest.hexdigest()


class SearchTool:
    """Top-k dense retrieval over a local corpus, formatted as ``Doc 1 (Title): text`` lines.

    Args:
        corpus: passages (a list of strings, or of ``{"text", "title"}`` records) or a ``datasets.Dataset`` with
            a ``text`` column and an optional ``title`` column.
        top_k: passages returned per query.
        embedder: ``None`` for all-MiniLM-L6-v2, or anything ``resolve_embedder`` accepts.
        path: folder for a persistent Chroma index; ``None`` keeps it in memory.
        collection: collection name in a persistent index (the in-memory one is named by fingerprint).
        timeout: time budget per call in seconds (used by ``run_tool_calls``).
        max_passage_chars: each passage is cut to this many characters in the result.
    """

    tag = "search"

    def __init__(
        self,
        corpus,
        top_k: int = 3,
        embedder=None,
        path: str | None = None,
        collection: str = "rapo-search",
        timeout: float = 30.0,
        max_passage_chars: int = 1000,
    ):
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {top_k}.")
        self.top_k = top_k
        self.timeout = timeout
        self.max_passage_chars = max_passage_chars
        self.embedder = resolve_embedder(embedder)
        texts, titles = _passages(corpus)
        self.fingerprint = corpus_fingerprint(texts, titles, self.embedder.name, self.embedder.dimension)
        self._lock = threading.Lock()
        self._collection = self._open(texts, titles, path, collection)

    def _open(self, texts: list[str], titles: list[str], path: str | None, name: str):
        import chromadb

        if path is None:
            # In-memory clients share one store per process, so the name must identify the contents.
            client, name = chromadb.EphemeralClient(), f"search-{self.fingerprint[:32]}"
        else:
            client = chromadb.PersistentClient(path=str(path))
        existing = {collection.name for collection in client.list_collections()}
        if name in existing:
            collection = client.get_collection(name, embedding_function=None)
            metadata = collection.metadata or {}
            if metadata.get("fingerprint") == self.fingerprint and collection.count() == len(texts):
                return collection
            logger.warning("Search index %r does not match this corpus or embedder; rebuilding it.", name)
            client.delete_collection(name)
        collection = client.create_collection(
            name,
            embedding_function=None,
            configuration={"hnsw": {"space": "cosine"}},
            metadata={"fingerprint": self.fingerprint, "embedder": self.embedder.name},
        )
        batch = min(_EMBED_BATCH, client.get_max_batch_size())
        for start in range(0, len(texts), batch):
            chunk = texts[start : start + batch]
            collection.add(
                ids=[str(start + offset) for offset in range(len(chunk))],
                embeddings=self.embedder.embed(chunk),
                documents=chunk,
                metadatas=[{"title": title} for title in titles[start : start + batch]],
            )
        return collection

    def search(self, query: str) -> list[dict]:
        """Top-k passages for ``query`` as ``{"text", "title", "score"}`` (cosine similarity), best first."""
        query = query.strip()
        if not query:
            raise ToolError("Empty search query: write what to look for between <search> and </search>.")
        with self._lock:  # one embed+query at a time: the embedder is not guaranteed thread-safe
            vector = self.embedder.embed([query])
            found = self._collection.query(
                query_embeddings=vector,
                n_results=min(self.top_k, self._collection.count()),
                include=["documents", "metadatas", "distances"],
            )
        return [
            {"text": text, "title": (meta or {}).get("title", ""), "score": 1.0 - distance}
            for text, meta, distance in zip(
                found["documents"][0], found["metadatas"][0], found["distances"][0]
            )
        ]

    def run(self, text: str) -> str:
        lines = []
        for rank, hit in enumerate(self.search(text), start=1):
            # One line per passage: a newline in its text or title would read as the start of another.
            passage = " ".join(hit["text"].split())[: self.max_passage_chars]
            title = " ".join(hit["title"].split())
            label = f"Doc {rank} ({title})" if title else f"Doc {rank}"
            lines.append(f"{label}: {passage}")
        return "\n".join(lines)
