"""Server mode: a `chroma run` subprocess shared by clients through TraceStore.connect."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rapo_trl.store import EmbedderMismatchError, StoreConfig, TraceStore

pytestmark = pytest.mark.server


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _chroma_executable() -> str:
    local = Path(sys.executable).with_name("chroma")
    return str(local) if local.exists() else (shutil.which("chroma") or pytest.skip("no `chroma` executable"))


@pytest.fixture
def chroma_server(tmp_path):
    """A `chroma run` server on a free loopback port; stopped by its pid afterwards."""
    port = _free_port()
    process = subprocess.Popen(
        [
            _chroma_executable(),
            "run",
            "--path",
            str(tmp_path / "server-db"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "ANONYMIZED_TELEMETRY": "False"},
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"chroma run did not start (exit code {process.poll()})")
                time.sleep(0.2)
        yield port
    finally:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()


def test_a_server_reader_is_refused_a_collection_that_is_not_there(chroma_server, embedder):
    from rapo_trl.store import MissingCollectionError

    with pytest.raises(MissingCollectionError, match="no collection 'never-built'"):
        TraceStore.connect("127.0.0.1", chroma_server, collection="never-built", embedder=embedder, must_exist=True)
    assert len(TraceStore.connect("127.0.0.1", chroma_server, collection="never-built", embedder=embedder)) == 0


def test_server_store_is_shared_between_clients(chroma_server, embedder, trajectory):
    config = StoreConfig(show_progress=False)
    writer = TraceStore.connect(
        "127.0.0.1", chroma_server, collection="shared", embedder=embedder, config=config
    )
    assert (
        writer.add_trajectories(
            [trajectory("1"), trajectory("2")], [1.0, -1.0], ["q1", "q2"], prompts=["What is 12*7?", "Other?"]
        )
        == 4
    )
    reader = TraceStore.connect(
        "127.0.0.1", chroma_server, collection="shared", embedder=embedder, config=config
    )
    assert len(reader) == 4
    got = reader.select(["What is 12*7?", "Other?"], top_k=1)
    assert got[0].question_id == "q1" and got[0].reward == 1.0 and got[1].is_fallback
    stats = reader.stats()
    assert (
        stats["records"] == 4
        and stats["size_bytes"] is None
        and stats["location"].endswith(str(chroma_server))
    )
    assert reader.describe() == {"location": f"127.0.0.1:{chroma_server}", "server": True, "collection": "shared",
                                 "records": 4, "embedder": "test-hashing-128"}
    from rapo_trl.embeddings import HashingEmbedder

    with pytest.raises(EmbedderMismatchError, match="was built with embedder 'test-hashing-128'"):
        TraceStore.connect("127.0.0.1", chroma_server, collection="shared", embedder=HashingEmbedder(16))


def test_connect_to_nothing_fails_clearly(embedder):
    with pytest.raises(ConnectionError, match=r"Cannot reach the Chroma server at 127\.0\.0\.1:"):
        TraceStore.connect("127.0.0.1", _free_port(), embedder=embedder)


def test_server_reader_sees_records_written_after_its_reward_map_warmed(chroma_server, embedder, trajectory):
    config = StoreConfig(show_progress=False)  # top 3: the two step-0 keys are the same text
    writer = TraceStore.connect(
        "127.0.0.1", chroma_server, collection="maps", embedder=embedder, config=config
    )
    reader = TraceStore.connect(
        "127.0.0.1", chroma_server, collection="maps", embedder=embedder, config=config
    )
    writer.add_trajectories([trajectory("1")], [-1.0], ["q1"], prompts=["What is 12*7?"])
    assert reader.select(["What is 12*7?"])[0].is_fallback  # its map now holds the -1 record
    # the same question, solved again, better: new ids the reader has never seen
    writer.add_trajectories([trajectory("84", tools=2)], [1.0], ["q1"], prompts=["What is 12*7?"])
    got = reader.select(["What is 12*7?"])[0]
    assert not got.is_fallback and got.reward == 1.0 and got.question_id == "q1"
