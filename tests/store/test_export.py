"""Export to a datasets.Dataset and rebuild a store from it."""

from __future__ import annotations

import numpy as np
import pytest

from rapo_trl.embeddings import HashingEmbedder
from rapo_trl.store import StoreConfig, TraceStore


def test_export_has_one_row_per_record(source_store):
    ds = source_store.to_dataset()
    assert len(ds) == len(source_store) == 7
    assert {
        "id",
        "key",
        "value",
        "reward",
        "question_id",
        "step_index",
        "source",
        "embedder",
        "embedding",
    } <= set(ds.column_names)
    assert len(ds[0]["embedding"]) == 128 and ds[0]["embedder"] == "test-hashing-128"
    # deterministic order: by question, trajectory, step
    order = list(zip(ds["question_id"], ds["trajectory_id"], ds["step_index"]))
    assert order == sorted(order)
    assert source_store.to_dataset(include_embeddings=False).column_names == [
        c for c in ds.column_names if c != "embedding"
    ]


@pytest.mark.parametrize("name", ["key", "id"])
def test_metadata_named_like_an_exported_column_is_refused(make_store, trajectory, name):
    # Exported under that name, it would replace every record's key (or id) in the dataset.
    store = make_store()
    with pytest.raises(ValueError, match=f"may not be named \\['{name}'\\]"):
        store.add_trajectories([trajectory("1")], [1.0], ["q1"], prompts=["What is 12*7?"], metadata={name: "run-3"})
    assert len(store) == 0
    store.add_trajectories([trajectory("1")], [1.0], ["q1"], prompts=["What is 12*7?"], metadata={"run": "run-3"})
    ds = store.to_dataset(include_embeddings=False)
    assert set(ds["run"]) == {"run-3"} and "What is 12*7?" in ds["key"]


def test_roundtrip_reuses_embeddings(source_store, embedder, tmp_path):
    ds = source_store.to_dataset()
    embedder.calls.clear()
    copy = TraceStore.from_dataset(
        ds, tmp_path / "copy", collection="copy", embedder=embedder, config=StoreConfig(show_progress=False)
    )
    assert embedder.calls == []  # vectors came from the dataset
    assert len(copy) == 7
    exported = copy.to_dataset()
    for column in ("id", "key", "value", "reward", "question_id", "step_index", "num_steps", "source"):
        assert exported[column] == ds[column], column
    np.testing.assert_allclose(np.array(exported["embedding"]), np.array(ds["embedding"]), atol=1e-6)
    query = ["What is 12*7? <think>I need to multiply twelve by seven"]
    assert copy.select(query)[0] == source_store.select(query)[0]


def test_import_with_another_embedder_re_embeds(source_store, tmp_path):
    other = HashingEmbedder(64, name="other-64")
    copy = TraceStore.from_dataset(
        source_store.to_dataset(), tmp_path / "other", embedder=other, config=StoreConfig(show_progress=False)
    )
    assert len(copy) == 7 and copy.stats()["embedder"] == "other-64"
    assert copy.collection.get(limit=1, include=["embeddings"])["embeddings"].shape == (1, 64)


def test_import_is_idempotent(source_store, tmp_path):
    ds = source_store.to_dataset(include_embeddings=False)
    copy = TraceStore.from_dataset(
        ds, tmp_path / "c", embedder=HashingEmbedder(32), config=StoreConfig(show_progress=False)
    )
    assert copy.add_records([]) == 0
    TraceStore.from_dataset(
        ds, tmp_path / "c", embedder=HashingEmbedder(32), config=StoreConfig(show_progress=False)
    )
    assert len(copy) == 7


def test_a_record_without_a_question_id_is_refused(source_store, tmp_path):
    import pytest

    ds = source_store.to_dataset(include_embeddings=False)
    ds = ds.map(lambda row, i: {"question_id": None if i == 2 else row["question_id"]}, with_indices=True)
    with pytest.raises(ValueError, match="Record row 2: question_id is empty; nothing was stored"):
        TraceStore.from_dataset(ds, tmp_path / "copy", embedder=HashingEmbedder(16))


@pytest.mark.parametrize("write_batch_size", [1024, 1])
def test_repeated_ids_are_refused_by_name_before_anything_is_stored(source_store, tmp_path, write_batch_size):
    """Two rows under one id (exports joined, an edited file) are two records the store can keep only one of: the
    import refuses them, naming the ids and where they came from, and writes no record, even of earlier batches."""
    from datasets import concatenate_datasets

    from rapo_trl.store import DuplicateRecordError

    ds = source_store.to_dataset(include_embeddings=False)
    q2 = [i for i, question in enumerate(ds["question_id"]) if question == "q2"]  # sorted last: written last
    changed = ds.select(q2).map(lambda row: {"value": row["value"] + " (edited)", "reward": 0.0})
    joined = concatenate_datasets([ds, changed])
    config = StoreConfig(show_progress=False, write_batch_size=write_batch_size)
    with pytest.raises(DuplicateRecordError, match=f"{ds['id'][q2[0]]!r}.*the dataset given.*nothing was stored"):
        TraceStore.from_dataset(joined, tmp_path / "copy", embedder=HashingEmbedder(16), config=config)
    assert len(TraceStore(tmp_path / "copy", embedder=HashingEmbedder(16))) == 0
    folder = tmp_path / "joined" / "data"
    folder.mkdir(parents=True)
    joined.to_parquet(str(folder / "train-00000-of-00001.parquet"))
    with pytest.raises(DuplicateRecordError, match=f"{ds['id'][q2[0]]!r}.*{tmp_path / 'joined'}"):
        TraceStore.from_hub(tmp_path / "joined", tmp_path / "hub-copy", embedder=HashingEmbedder(16), config=config)


@pytest.mark.parametrize("setting", ["key_max_chars", "system_prompt"])
def test_records_whose_keys_were_cut_in_different_ways_are_refused_together(make_store, trajectory, tmp_path,
                                                                             setting):
    """Exports of two stores joined, one cutting keys to 60 characters (or of a system prompt) and one not: no single
    way of cutting queries matches both halves' keys, so the rebuilt store would search half of them with queries cut
    otherwise, with no error."""
    from datasets import concatenate_datasets

    from rapo_trl.store import KeySettingsMismatchError

    instructions = "Solve it with the Python tool."
    cut = make_store("cut", **({"key_max_chars": 60} if setting == "key_max_chars" else {"system_prompt": instructions}))
    cut.add_trajectories([trajectory("1", tools=2)], [1.0], ["q1"], prompts=[f"{instructions} What is 12*7?"])
    plain = make_store("plain")
    plain.add_trajectories([trajectory("2", tools=2)], [1.0], ["q2"], prompts=["What is 12*7 exactly, in full?"])
    for first, second in ((plain, cut), (cut, plain)):
        joined = concatenate_datasets([first.to_dataset(), second.to_dataset()])
        with pytest.raises(KeySettingsMismatchError, match="more than one way"):
            TraceStore.from_dataset(joined, tmp_path / "copy", embedder=HashingEmbedder(16))
        assert not (tmp_path / "copy").exists()
