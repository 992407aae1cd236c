"""Fixtures for the trace-store tests: a fast model-free embedder that counts its calls, tagged
trajectories, and a store factory in a fresh directory."""

from __future__ import annotations

import pytest

from rapo_trl.embeddings import HashingEmbedder


class CountingEmbedder(HashingEmbedder):
    """Hashed bag-of-words vectors; remembers every ``embed`` call's size."""

    def __init__(self, dimension: int = 128, name: str | None = None):
        super().__init__(dimension, name=name or "test-hashing-128")
        self.calls: list[int] = []

    def embed(self, texts):
        self.calls.append(len(texts))
        return super().embed(texts)


def trajectory(answer: str = "84", tools: int = 1, topic: str = "multiply twelve by seven") -> str:
    """A tagged agent trajectory with ``tools`` python calls and a final answer."""
    steps = [
        f"<think>I need to {topic} (attempt {i}).</think>\n<python>print(12 * 7 + {i})</python>\n"
        f"<result>\n{84 + i}\n</result>\n"
        for i in range(tools)
    ]
    return "".join(steps) + f"<think>Done.</think>\n<answer>\\boxed{{{answer}}}</answer>"


@pytest.fixture(name="trajectory")
def trajectory_fixture():
    """The :func:`trajectory` builder."""
    return trajectory


@pytest.fixture
def embedder():
    return CountingEmbedder()


@pytest.fixture
def make_store(tmp_path, embedder):
    """``make_store(name="s", **config)`` -> a TraceStore in its own directory under tmp_path."""
    from rapo_trl.store import StoreConfig, TraceStore

    def factory(name: str = "store", collection: str = "traces", embedder_=None, **config):
        config.setdefault("show_progress", False)
        return TraceStore(
            tmp_path / name,
            collection=collection,
            embedder=embedder_ or embedder,
            config=StoreConfig(**config),
        )

    return factory
