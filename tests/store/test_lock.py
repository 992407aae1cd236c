"""The embedded store's inter-process lock, with real processes on a real Chroma folder.

Embedded Chroma is single-process: two writers corrupt it silently, a reader beside a writer sees a
half-written state. These tests start real processes that hold a store open and check that a second
process gets one clear error naming the holder, that nothing is lost, and that counts are honest.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from rapo_trl.embeddings import HashingEmbedder
from rapo_trl.store import StoreConfig, StoreLockedError, TraceStore, TraceStoreError

_HOLDER = textwrap.dedent(
    """
    import sys, time
    from rapo_trl.embeddings import HashingEmbedder
    from rapo_trl.store import StoreConfig, TraceStore

    path, mode = sys.argv[1], sys.argv[2]
    store = TraceStore(path, embedder=HashingEmbedder(64), config=StoreConfig(show_progress=False))
    if mode == "write":
        trajectories = [f"<python>print({i})</python><result>{i}</result><answer>{i}</answer>" for i in range(50)]
        added = store.add_trajectories(trajectories, [1.0] * 50, [f"q{i}" for i in range(50)])
        print("added", added, flush=True)
    print("ready", flush=True)
    sys.stdin.readline()  # hold the store open until the test says so
    """
)

_WRITER = textwrap.dedent(
    """
    import sys
    from rapo_trl.embeddings import HashingEmbedder
    from rapo_trl.store import StoreConfig, StoreLockedError, TraceStore, TraceStoreError

    try:
        store = TraceStore(sys.argv[1], embedder=HashingEmbedder(64), config=StoreConfig(show_progress=False))
        trajectories = [f"<python>print({i})</python><result>{i}</result><answer>{i}</answer>" for i in range(50)]
        print("added", store.add_trajectories(trajectories, [1.0] * 50, [f"q{i}" for i in range(50)]))
    except StoreLockedError as error:
        print("LOCKED", error)
        sys.exit(3)
    """
)


def _env():
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def _start_holder(path, mode):
    process = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path), mode],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
    )  # fmt: skip
    lines = []
    while True:
        line = process.stdout.readline()
        if not line:
            raise AssertionError(f"holder died: {process.stderr.read()}")
        lines.append(line.strip())
        if line.strip() == "ready":
            return process, lines


def _stop(process):
    process.stdin.close()
    process.wait(timeout=60)


def _run_writer(path):
    return subprocess.run(
        [sys.executable, "-c", _WRITER, str(path)], capture_output=True, text=True, env=_env(), timeout=120
    )


def _open(path):
    return TraceStore(path, embedder=HashingEmbedder(64), config=StoreConfig(show_progress=False))


def _check_readable(store, expected):
    assert len(store) == expected
    page = store.collection.get(include=["embeddings", "metadatas"])
    assert len(page["ids"]) == expected and np.isfinite(np.asarray(page["embeddings"])).all()


def test_second_writer_process_gets_one_clear_line_and_nothing_is_lost(tmp_path):
    path = tmp_path / "store"
    holder, lines = _start_holder(path, "write")
    try:
        assert "added 100" in lines  # 50 questions x 2 steps
        second = _run_writer(path)
        assert second.returncode == 3, second.stderr
        message = second.stdout.strip()
        assert message.count("\n") == 0
        assert f"pid {holder.pid}" in message and "writing" in message
        assert "TraceStore.connect" in message and "chroma run --path" in message
    finally:
        _stop(holder)
    # The holder is gone: the second writer now works, and adds nothing twice.
    again = _run_writer(path)
    assert again.returncode == 0, again.stderr + again.stdout
    assert again.stdout.strip() == "added 0"
    _check_readable(_open(path), 100)


def test_reader_process_beside_a_writer_gets_a_clear_error_not_a_traceback(tmp_path):
    path = tmp_path / "store"
    holder, _ = _start_holder(path, "write")
    try:
        with pytest.raises(StoreLockedError, match=rf"Cannot open .*pid {holder.pid} .*writing"):
            _open(path)
    finally:
        _stop(holder)
    with _open(path) as store:  # consistent once the writer is done
        _check_readable(store, 100)


def test_readers_share_and_block_a_writer_process(tmp_path):
    path = tmp_path / "store"
    with _open(path) as store:
        store.add_trajectories(["<python>1</python><result>1</result><answer>1</answer>"], [1.0], ["q"])
    first, _ = _start_holder(path, "read")
    second, _ = _start_holder(path, "read")  # two readers at once are fine
    try:
        reader = _open(path)  # and a third, in this process
        assert len(reader) == 2
        writer = _run_writer(path)
        assert writer.returncode == 3, writer.stderr
        assert "reading" in writer.stdout and "Cannot write to" in writer.stdout
        # This process reads too: its own write is refused, and its read lock is kept.
        with pytest.raises(StoreLockedError, match="reading"):
            reader.add_trajectories(["<python>2</python><result>2</result><answer>2</answer>"], [1.0], ["q2"])
        assert len(reader) == 2
        reader.close()
    finally:
        _stop(first)
        _stop(second)
    assert _run_writer(path).returncode == 0


def test_a_killed_writer_releases_the_store(tmp_path):
    path = tmp_path / "store"
    holder, _ = _start_holder(path, "write")
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=30)
    result = _run_writer(path)
    assert result.returncode == 0, result.stdout + result.stderr
    _check_readable(_open(path), 100)


def test_one_process_opens_a_store_many_times_and_close_lets_others_write(tmp_path):
    path = tmp_path / "store"
    first, second = _open(path), _open(path)
    first.add_trajectories(["<python>1</python><result>1</result><answer>1</answer>"], [1.0], ["q"])
    assert len(second) == 2
    assert _run_writer(path).returncode == 3  # this process writes: others must wait
    first.close()
    assert len(second) == 2  # closing one store leaves the others of this process working
    assert _run_writer(path).returncode == 3  # `second` still has it open
    second.close()
    result = _run_writer(path)
    assert result.returncode == 0, result.stdout + result.stderr
    with pytest.raises(TraceStoreError, match="was closed"):  # a closed store is not silently reused
        len(first)


def test_build_fails_before_sampling_when_another_process_has_the_store(tmp_path):
    path = tmp_path / "store"
    _open(path).close()
    holder, _ = _start_holder(path, "read")
    calls = []
    try:
        store = _open(path)
        with pytest.raises(StoreLockedError):
            store.build_from_agent(lambda p: calls.append(p) or "x", ["a question"], lambda **_: [1.0])
        assert calls == []
    finally:
        _stop(holder)


def test_concurrent_writer_threads_report_what_they_really_added(tmp_path):
    store = _open(tmp_path / "store")
    trajectories = [f"<python>print({i})</python><result>{i}</result><answer>{i}</answer>" for i in range(200)]
    ids = [f"q{i}" for i in range(200)]
    counts = []

    def write():
        counts.append(store.add_trajectories(trajectories, [1.0] * 200, ids))

    threads = [threading.Thread(target=write) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(store) == 400
    assert sum(counts) == 400  # before: each thread counted the records the others were adding
