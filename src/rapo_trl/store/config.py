"""Settings of a trace store: selection rule, key preprocessing, index and batching."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_FALLBACK_TEXT = (
    "No reliable reference step was found for this situation. Reason carefully on your own: check "
    "the previous steps, decide what is still missing, and continue step by step."
)


@dataclass
class StoreConfig:
    """How a :class:`TraceStore` builds keys, indexes them and picks a step for a context."""

    # --- selection (docs/design.md, Hybrid rollouts) ---
    top_k: int = 3
    """Nearest keys considered per query; the one with the highest stored reward is kept."""
    min_reward: float = 0.0
    """If the best candidate's reward is <= this, the fallback text is returned instead."""
    fallback_text: str = DEFAULT_FALLBACK_TEXT
    """Inserted when nothing usable is retrieved: tells the model to reason carefully on its own."""

    # --- keys and queries ---
    key_max_chars: int = 1300
    """Keys and queries keep only the last this-many characters of their context (paper: ~1300)."""
    system_prompt: str | None = None
    """A system prompt text to cut out of contexts (chat-template system turns are always cut), e.g. the instructions
    that begin every plain-text prompt. A new collection records it, and a store reopened (or rebuilt from an
    export) with this unset cuts the recorded one."""

    # --- index (fixed when the collection is created) ---
    hnsw_space: str = "cosine"
    """Distance of the HNSW index; embeddings are normalised, so cosine similarity = 1 - distance."""
    hnsw_ef_construction: int = 100
    """HNSW build-time candidate list size (Chroma default)."""
    hnsw_ef_search: int = 100
    """HNSW query-time candidate list size: higher is more accurate and slower (Chroma default).
    Fixed at creation like the others; to change it later, ``collection.modify(configuration=...)``
    and reopen the store (a loaded index keeps its value)."""
    hnsw_max_neighbors: int = 16
    """HNSW graph degree M (Chroma default)."""

    local_index: str | None = None
    """Optional in-process k-NN index that ``select`` searches instead of querying Chroma (which
    stays the store of record; every returned record is read back from it): ``"hnsw"`` (hnswlib,
    same HNSW settings; needs the ``hnswlib`` package) or ``"exact"`` (numpy brute force, small
    stores only). Built from the stored vectors on first select (or ``build_local_index()``), kept
    in step with this process's writes, re-synced when the record count changes."""
    local_index_sync_s: float = 10.0
    """With ``local_index``: how often (seconds) ``select`` compares the collection's record count
    with the index's to pick up records other writers added (``collection.count()`` costs about
    one search at 170k records). 0 checks on every select. A winner deleted by another writer is
    never returned whatever this is: winners are always read back from Chroma."""

    # --- batching ---
    write_batch_size: int = 1024
    """Records embedded and written per Chroma call; a killed build loses at most one batch. A question's records go
    in one call, past this size when there are more, so a killed build never leaves part of a question."""
    read_batch_size: int = 5000
    """Records fetched per Chroma call when exporting or computing stats."""
    show_progress: bool = True
    """Show tqdm progress bars on long builds (only when more than one batch is written)."""

    def __post_init__(self) -> None:
        if self.top_k < 1:
            raise ValueError(f"StoreConfig.top_k must be >= 1, got {self.top_k}.")
        if self.key_max_chars < 1:
            raise ValueError(f"StoreConfig.key_max_chars must be >= 1, got {self.key_max_chars}.")
        for name in ("write_batch_size", "read_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"StoreConfig.{name} must be >= 1, got {getattr(self, name)}.")
        if self.hnsw_space not in ("cosine", "l2", "ip"):
            raise ValueError(
                f"StoreConfig.hnsw_space must be 'cosine', 'l2' or 'ip', got {self.hnsw_space!r}."
            )
        if self.local_index not in (None, "hnsw", "exact"):
            raise ValueError(
                f"StoreConfig.local_index must be None, 'hnsw' or 'exact', got {self.local_index!r}."
            )

    def hnsw_configuration(self) -> dict:
        """The Chroma collection ``configuration`` for these index settings."""
        return {
            "hnsw": {
                "space": self.hnsw_space,
                "ef_construction": self.hnsw_ef_construction,
                "ef_search": self.hnsw_ef_search,
                "max_neighbors": self.hnsw_max_neighbors,
            }
        }
