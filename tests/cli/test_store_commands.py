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
