"""One sentence-transformers embedder shared by threads (``rapo build-store`` fills the store and the warm start's
collection at once with the default embedder): every rollout context is still embedded from its newest end, and
documents from their start, however the threads' calls interleave."""

from __future__ import annotations

import threading

import numpy as np

from rapo_trl.embeddings import SentenceTransformerEmbedder


class _Tokenizer:
    """Records every change of the truncation side, so a test can wait for one."""

    def __init__(self):
        self._side = "right"
        self.changed = threading.Condition()
        self.sets: list[str] = []

    @property
    def truncation_side(self):
        return self._side

    @truncation_side.setter
    def truncation_side(self, side):
        with self.changed:
            self._side = side
            self.sets.append(side)
            self.changed.notify_all()


class _Model:
    """Stands in for a SentenceTransformer: its ``encode`` reads the truncation side as a later batch would, after the
    other thread has had every chance to change it."""

    max_seq_length = 256

    def __init__(self):
        self.tokenizer = _Tokenizer()
        self.read: dict[str, str] = {}

    def get_embedding_dimension(self):
        return 2

    def encode(self, texts, **_):
        changed = self.tokenizer.changed
        with changed:
            if texts == ["first"]:  # until the second call has set its side, if it can while this one runs
                changed.wait_for(lambda: len(self.tokenizer.sets) >= 2, timeout=1.0)
            else:  # until the first call has put its side back, if it can while this one runs
                changed.wait_for(lambda: len(self.tokenizer.sets) >= 3, timeout=1.0)
        self.read[texts[0]] = self.tokenizer.truncation_side
        return np.ones((len(texts), 2), dtype=np.float32)


def test_threads_sharing_an_embedder_embed_every_context_from_its_newest_end():
    model = _Model()
    embedder = SentenceTransformerEmbedder(model, name="fake")
    first = threading.Thread(target=embedder.embed_newest, args=(["first"],))
    first.start()
    with model.tokenizer.changed:
        model.tokenizer.changed.wait_for(lambda: model.tokenizer.sets, timeout=5.0)
    second = threading.Thread(target=embedder.embed_newest, args=(["second"],))
    second.start()
    first.join()
    second.join()
    assert model.read == {"first": "left", "second": "left"}
    assert model.tokenizer.truncation_side == "right"  # documents (the search tool) keep their start
