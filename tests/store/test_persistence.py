"""Persistence: reopening from disk, and a build killed midway that reopens and resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from rapo_trl.store import KeySettingsMismatchError, MissingCollectionError, StoreConfig, TraceStore


def _forget_open_clients():
    # Chroma caches one client per path in a process; dropping it makes a reopen read the disk.
    from chromadb.api.shared_system_client import SharedSystemClient

    SharedSystemClient.clear_system_cache()


def test_reopen_reads_records_and_checks_the_embedder(tmp_path, embedder, trajectory):
    store = TraceStore(tmp_path / "s", collection="math-steps", embedder=embedder)
    store.add_trajectories([trajectory("1", tools=2)], [1.0], ["q1"], prompts=["What is 12*7?"])
    before = store.select(["What is 12*7?"])[0]
    del store
    _forget_open_clients()
    reopened = TraceStore(tmp_path / "s", collection="math-steps", embedder=embedder)
    assert len(reopened) == 3
    after = reopened.select(["What is 12*7?"])[0]
    assert (after.record_id, after.text, after.reward) == (before.record_id, before.text, before.reward)
    assert reopened.collection.metadata["embedder"] == embedder.name
    # another collection in the same directory is independent
    assert len(TraceStore(tmp_path / "s", collection="other", embedder=embedder)) == 0


def test_a_reopened_store_cuts_queries_as_its_keys_were_cut(tmp_path, embedder, trajectory):
    # Its keys keep their last 3000 characters: a reader at the default 1300 would cut the same context otherwise.
    store = TraceStore(tmp_path / "s", embedder=embedder, config=StoreConfig(key_max_chars=3000))
    store.add_trajectories([trajectory("1", tools=2)], [1.0], ["q1"], prompts=["What is 12*7?"])
    del store
    _forget_open_clients()
    reopened = TraceStore(tmp_path / "s", embedder=embedder, must_exist=True)  # as RAPOTrainer(trace_store=PATH)
    assert reopened.config.key_max_chars == 3000
    _forget_open_clients()
    with pytest.raises(KeySettingsMismatchError, match="cut its keys to their last 3000 characters"):
        TraceStore(tmp_path / "s", embedder=embedder, config=StoreConfig(key_max_chars=500))


INSTRUCTIONS = "Solve it with the Python tool and box the answer. " * 4


def test_a_reopened_store_cuts_the_system_prompt_its_keys_were_cut_of(tmp_path, embedder, trajectory):
    # Plain-text prompts whose instructions the keys left out: a reader at the default would query with them.
    plain = f"{INSTRUCTIONS}\n\nQuestion: What is 12*7?\n"
    store = TraceStore(tmp_path / "s", embedder=embedder, config=StoreConfig(system_prompt=INSTRUCTIONS))
    store.add_trajectories([trajectory("1", tools=2)], [1.0], ["q1"], prompts=[plain])
    key = store.collection.get(where={"step_index": 0}, include=["documents"])["documents"][0]
    del store
    _forget_open_clients()
    reopened = TraceStore(tmp_path / "s", embedder=embedder, must_exist=True)  # as RAPOTrainer(trace_store=PATH)
    assert reopened.config.system_prompt == INSTRUCTIONS
    assert reopened.preprocess(plain) == key and "Python tool" not in key
    _forget_open_clients()
    with pytest.raises(KeySettingsMismatchError, match="cut the system prompt 'Solve it with the Python tool"):
        TraceStore(tmp_path / "s", embedder=embedder, config=StoreConfig(system_prompt="Other instructions."))
    # A collection that recorded none takes the one given: its keys never held that text.
    TraceStore(tmp_path / "other", embedder=embedder).close()
    _forget_open_clients()
    given = TraceStore(tmp_path / "other", embedder=embedder, config=StoreConfig(system_prompt=INSTRUCTIONS))
    assert given.config.system_prompt == INSTRUCTIONS


def test_a_reopened_store_reads_distances_in_its_index_space(tmp_path, embedder, trajectory):
    # Chroma keeps the space the collection was created with: a reader at the default (cosine) would read its squared
    # l2 distances as cosine ones, so every retrieval's similarity (and a local index's distances) would be wrong.
    store = TraceStore(tmp_path / "s", embedder=embedder, config=StoreConfig(hnsw_space="l2"))
    store.add_trajectories([trajectory("1", tools=2)], [1.0], ["q1"], prompts=["What is 12*7?"])
    before = store.select(["What is 12 times 7?"])[0]
    del store
    _forget_open_clients()
    reopened = TraceStore(tmp_path / "s", embedder=embedder, must_exist=True)
    assert reopened.config.hnsw_space == "l2"
    after = reopened.select(["What is 12 times 7?"])[0]
    assert (after.record_id, after.similarity) == (before.record_id, pytest.approx(before.similarity))
    _forget_open_clients()
    with pytest.raises(KeySettingsMismatchError, match="'l2' distances"):
        TraceStore(tmp_path / "s", embedder=embedder, config=StoreConfig(hnsw_space="ip"))


def test_a_reader_of_a_built_store_is_refused_a_collection_that_is_not_there(tmp_path, embedder, trajectory):
    store = TraceStore(tmp_path / "s", collection="math-steps", embedder=embedder)
    store.add_trajectories([trajectory("1", tools=2)], [1.0], ["q1"], prompts=["What is 12*7?"])
    with pytest.raises(MissingCollectionError, match=r"no collection 'math_steps' \(its collections: math-steps\)"):
        TraceStore(tmp_path / "s", collection="math_steps", embedder=embedder, must_exist=True)
    names = [c.name for c in store.client.list_collections()]
    assert names == ["math-steps"]  # the refused name was never created
    assert len(TraceStore(tmp_path / "s", collection="math-steps", embedder=embedder, must_exist=True)) == 3


@pytest.mark.parametrize("folder", ["empty", "missing"])
def test_a_reader_pointed_at_a_folder_without_a_store_makes_nothing_there(tmp_path, embedder, folder):
    path = tmp_path / folder
    if folder == "empty":
        path.mkdir()
    there = "it holds no chroma.sqlite3" if folder == "empty" else "the folder does not exist"
    with pytest.raises(MissingCollectionError, match=rf"has no collection 'traces' \({there}\)\. Build it"):
        TraceStore(path, embedder=embedder, must_exist=True)
    assert (list(path.iterdir()) == []) if folder == "empty" else not path.exists()  # no database, no lock file


_KILLED_BUILD = textwrap.dedent(
    """
    import os, sys
    from rapo_trl.embeddings import HashingEmbedder
    from rapo_trl.store import StoreConfig, TraceStore

    path, stop_after = sys.argv[1], int(sys.argv[2])
    calls = []

    def agent(prompt):
        calls.append(prompt)
        if len(calls) > stop_after:
            os.kill(os.getpid(), 9)  # killed mid-build, no cleanup
        return "<python>print(1)</python><result>1</result><answer>" + prompt + "</answer>"

    store = TraceStore(path, embedder=HashingEmbedder(64), config=StoreConfig(show_progress=False))
    store.build_from_agent(agent, [f"question {i}" for i in range(10)], lambda prompts, completions, **_:
                           [1.0] * len(completions), num_samples=2, questions_per_batch=2)
    """
)


def _build(path, stop_after):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, "-c", _KILLED_BUILD, str(path), str(stop_after)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_killed_build_reopens_and_resumes(tmp_path):
    path = tmp_path / "killed"
    first = _build(path, stop_after=9)  # dies while sampling the 3rd batch of questions
    assert first.returncode == -signal.SIGKILL, first.stderr
    from rapo_trl.embeddings import HashingEmbedder

    store = TraceStore(path, embedder=HashingEmbedder(64), config=StoreConfig(show_progress=False))
    assert len(store) == 4 * 2  # the first two batches (4 questions x 1 distinct trajectory x 2 steps)
    calls = []

    def agent(prompt):
        calls.append(prompt)
        return "<python>print(1)</python><result>1</result><answer>" + prompt + "</answer>"

    store.build_from_agent(
        agent,
        [f"question {i}" for i in range(10)],
        lambda prompts, completions, **_: [1.0] * len(completions),
        num_samples=2,
        questions_per_batch=2,
    )
    assert len(calls) == 6 * 2 and "question 3" not in calls  # only the 6 unfinished questions
    stats = store.stats()
    assert stats["records"] == 10 * 2 and stats["questions"] == 10  # no duplicates
