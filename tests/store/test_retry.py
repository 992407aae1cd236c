"""Retrieval against a store that fails: a real Chroma server killed mid-run, and unencodable text."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

import pytest

from rapo_trl.store import StoreConfig, TraceStore, retry
from rapo_trl.store.retry import clean_text, select_with_retry
from tests.store.test_server import _chroma_executable, _free_port


def test_clean_text_replaces_only_lone_surrogates():
    assert clean_text("plain, accents é and emoji 🙂") == "plain, accents é and emoji 🙂"
    assert clean_text("caf\udce9 \ud800") == "caf? ?"


@pytest.mark.server
def test_a_killed_server_costs_the_retrieval_not_the_caller(tmp_path, embedder, trajectory, monkeypatch):
    port = _free_port()
    server = subprocess.Popen(
        [_chroma_executable(), "run", "--path", str(tmp_path / "db"), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "ANONYMIZED_TELEMETRY": "False"},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "chroma run did not start"
                time.sleep(0.2)
        store = TraceStore.connect("127.0.0.1", port, embedder=embedder, config=StoreConfig(show_progress=False))
        store.add_trajectories([trajectory("1")], [1.0], ["q1"], prompts=["What is 12*7?"])
        (found,) = select_with_retry(store, ["What is 12*7? caf\udce9"])  # a lone surrogate in the query
        assert not found.is_fallback
    finally:
        os.kill(server.pid, signal.SIGKILL)
        server.wait(timeout=30)
    slept = []
    monkeypatch.setattr(retry.time, "sleep", slept.append)  # the backoff waits, recorded instead of slept
    assert select_with_retry(store, ["What is 12*7?"], attempts=3, backoff_s=0.25) is None
    assert slept == [0.25, 0.5]
