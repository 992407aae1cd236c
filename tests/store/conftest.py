"""Fixtures for the trace-store tests: a fast model-free embedder that counts its calls, tagged
trajectories, a store factory in a fresh directory, a built store to export, and a `chroma run` server."""

from __future__ import annotations

import pytest

from rapo_trl.embeddings import HashingEmbedder
from tests.helpers.chroma_server import ChromaServer, chroma_executable


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



@pytest.fixture
def source_store(make_store, trajectory):
    """A built store of 7 records over two questions, with a source name, for export and Hub round trips."""
    store = make_store("source")
    store.add_trajectories(
        [trajectory("1", tools=2), trajectory("2"), trajectory("3", topic="search a capital")],
        [1.0, 0.0, 0.5],
        ["q1", "q1", "q2"],
        prompts=["What is 12*7?", "What is 12*7?", "Capital of Peru?"],
        source="scripted-expert",
    )
    return store


@pytest.fixture
def chroma_server(tmp_path):
    """A started `chroma run` server on a free loopback port, stopped afterwards (a test may kill it first); the test
    is skipped where no `chroma` executable is installed."""
    if chroma_executable() is None:
        pytest.skip("no `chroma` executable")
    server = ChromaServer(tmp_path / "server-db").start()
    yield server
    server.stop()
