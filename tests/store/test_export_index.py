"""A store's HNSW index settings through an export and back: the rebuilt store searches as the exported one did."""

from __future__ import annotations

import logging

import pytest

from rapo_trl.store import KeySettingsMismatchError, StoreConfig, TraceStore

SETTINGS = {"hnsw_space": "l2", "hnsw_ef_construction": 64, "hnsw_ef_search": 50, "hnsw_max_neighbors": 8}


def _hnsw(store) -> dict:
    built = store.collection.configuration["hnsw"]
    return {f"hnsw_{name}": built[name] for name in ("space", "ef_construction", "ef_search", "max_neighbors")}


@pytest.fixture
def l2_store(make_store, trajectory):
    store = make_store("l2", **SETTINGS)
    store.add_trajectories([trajectory("1", tools=2), trajectory("3", topic="search a capital")], [1.0, 0.5],
                           ["q1", "q2"], prompts=["What is 12*7?", "Capital of Peru?"])
    return store


@pytest.mark.parametrize("through", ["dataset", "folder"])
def test_a_rebuilt_store_keeps_the_exported_index_settings(l2_store, embedder, tmp_path, through):
    # Rebuilt with the defaults, an l2 (or ip) store of a non-normalised embedder would rank its neighbours otherwise.
    if through == "dataset":
        copy = TraceStore.from_dataset(l2_store.to_dataset(), tmp_path / "copy", embedder=embedder)
    else:
        copy = TraceStore.from_hub(l2_store.export_to_folder(tmp_path / "export"), tmp_path / "copy", embedder=embedder)
    assert _hnsw(copy) == _hnsw(l2_store) == SETTINGS
    assert {name: getattr(copy.config, name) for name in SETTINGS} == SETTINGS
    query = ["What is 12*7? <think>I need to multiply twelve by seven"]
    assert copy.select(query)[0] == l2_store.select(query)[0]
    # The settings travel as the store's own columns, not as record metadata of every imported record.
    assert set(copy.collection.get(limit=1, include=["metadatas"])["metadatas"][0]).isdisjoint(SETTINGS)


def test_a_rebuilt_store_refuses_another_space_asked_for(l2_store, embedder, tmp_path):
    with pytest.raises(KeySettingsMismatchError, match="'l2'.*hnsw_space='ip'"):
        TraceStore.from_dataset(l2_store.to_dataset(), tmp_path / "copy", embedder=embedder,
                                config=StoreConfig(hnsw_space="ip"))
    assert not (tmp_path / "copy").exists()  # refused before a store was made


def test_another_graph_setting_asked_for_is_used_and_warned_about(l2_store, embedder, tmp_path, caplog):
    # ef and M change the index's speed and recall, not its distances: a caller's own choice wins, said aloud.
    with caplog.at_level(logging.WARNING, logger="rapo_trl.store"):
        copy = TraceStore.from_dataset(l2_store.to_dataset(), tmp_path / "copy", embedder=embedder,
                                       config=StoreConfig(hnsw_ef_search=200))
    assert _hnsw(copy) == {**SETTINGS, "hnsw_ef_search": 200}
    assert "hnsw_ef_search=50" in caplog.text and "hnsw_ef_search=200" in caplog.text


def test_an_export_without_index_settings_rebuilds_with_the_config_given(l2_store, embedder, tmp_path):
    # An export written before the settings travelled with it: the caller's config (default: cosine) applies.
    old = l2_store.to_dataset().remove_columns(list(SETTINGS))
    copy = TraceStore.from_dataset(old, tmp_path / "copy", embedder=embedder)
    assert _hnsw(copy)["hnsw_space"] == "cosine"
