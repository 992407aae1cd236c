"""``rapo store stats|query``: they read a store and never write one; their mistakes answer in one line."""

from __future__ import annotations

import pytest

from rapo_trl.cli import main
from rapo_trl.store import TraceStore


@pytest.fixture
def store_path(tmp_path):
    path = tmp_path / "store"
    TraceStore(path).close()  # the default collection, made and empty; the embedder never loads
    return path


def _collections(path) -> list[str]:
    with TraceStore(path) as store:
        return sorted(collection.name for collection in store.client.list_collections())


@pytest.mark.parametrize("action", [["stats"], ["query", "What is 2 + 3?"]])
def test_a_misspelled_collection_is_named_and_never_created(store_path, capsys, action):
    code = main(["store", action[0], str(store_path), *action[1:], "--collection", "trace"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert "no collection 'trace' (its collections: traces)" in lines[0]
    assert _collections(store_path) == ["traces"]


def test_a_folder_without_a_store_is_named_and_left_empty(tmp_path, capsys):
    (tmp_path / "elsewhere").mkdir()
    code = main(["store", "stats", str(tmp_path / "elsewhere")])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "it holds no chroma.sqlite3" in lines[0], lines
    assert list((tmp_path / "elsewhere").iterdir()) == []


@pytest.mark.parametrize("top_k", ["0", "-2"])
def test_a_top_k_below_one_is_refused_while_parsing(store_path, capsys, top_k):
    with pytest.raises(SystemExit) as exit_:
        main(["store", "query", str(store_path), "What is 2 + 3?", "--top_k", top_k])
    assert exit_.value.code == 2
    assert f"--top_k/--top-k: must be at least 1, got {int(top_k)}" in capsys.readouterr().err


def test_a_store_built_with_another_embedder_is_read_and_queried_where_it_can_be(tmp_path, capsys):
    """A store built in Python with the hashing embedder answers stats and query (the embedder is made again from
    its name); one built with a model of the user's own answers stats, and its query names the embedder."""
    import json

    import numpy as np

    from rapo_trl.embeddings import CallableEmbedder, HashingEmbedder

    def own_model(texts):
        vectors = np.ones((len(texts), 8), dtype=np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    trajectory = "<think>Add.</think>\n<python>\nprint(2 + 3)\n</python>\n<result>\n5\n</result>\n<answer>5</answer>"
    for name, embedder in (("hashing", HashingEmbedder(64)), ("own", CallableEmbedder(own_model, "my-model", 8))):
        with TraceStore(tmp_path / name, embedder=embedder) as store:
            store.add_trajectories([trajectory], [1.0], ["q1"], prompts=["What is 2 + 3?"])
        assert main(["store", "stats", str(tmp_path / name)]) == 0
        stats = json.loads(capsys.readouterr().out)
        assert stats["records"] == 2 and stats["questions"] == 1
    assert main(["store", "query", str(tmp_path / "hashing"), "What is 2 + 3?"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert not found["fallback"] and found["question_id"] == "q1" and "print(2 + 3)" in found["text"]
    assert main(["store", "query", str(tmp_path / "own"), "What is 2 + 3?"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "built with embedder 'my-model' (dimension 8)" in lines[0], lines
