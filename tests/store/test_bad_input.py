"""Every bad input fails with a clear error naming the problem, and loses nothing already stored."""

from __future__ import annotations

import math
import os

import pytest
from datasets import Dataset

from rapo_trl.embeddings import CallableEmbedder, HashingEmbedder
from rapo_trl.store import (
    CorruptStoreError,
    EmbedderMismatchError,
    StoreConfig,
    StorePathError,
    TraceStore,
)

GOOD = "<think>t</think><python>print(1)</python><result>1</result><answer>1</answer>"

TRAJECTORY_CASES = [
    # (trajectories, rewards, question ids, error pattern)
    ([""], [1.0], ["q"], r"row 0: trajectory is empty"),
    (["   \n"], [1.0], ["q"], r"row 0: trajectory is empty"),
    (["just some prose, no tags"], [1.0], ["q"], r"row 0: trajectory has no RAPO tags"),
    ([None], [1.0], ["q"], r"row 0: trajectory is a NoneType"),
    ([GOOD, GOOD + " "], [1.0, math.nan], ["q", "q"], r"row 1: reward is NaN"),
    ([GOOD], [math.inf], ["q"], r"reward is infinite"),
    ([GOOD], ["high"], ["q"], r"reward is 'high', not a number"),
    ([GOOD], [1.0], [""], r"question id is missing"),
    ([GOOD, GOOD], [1.0], ["q", "q"], r"differ in length"),
    ([""] * 7, [1.0] * 7, ["q"] * 7, r"7 invalid .* \(and 2 more\)"),
]


@pytest.mark.parametrize(("texts", "rewards", "ids", "pattern"), TRAJECTORY_CASES)
def test_bad_trajectories_store_nothing(make_store, texts, rewards, ids, pattern):
    store = make_store()
    store.add_trajectories([GOOD], [1.0], ["kept"])
    with pytest.raises(ValueError, match=pattern):
        store.add_trajectories(texts, rewards, ids)
    assert len(store) == 2  # the earlier records are intact, nothing of the bad call was written


def test_skip_mode_stores_the_valid_rows(make_store):
    store = make_store()
    assert (
        store.add_trajectories([GOOD, "", "untagged"], [1.0, 1.0, 1.0], ["a", "b", "c"], on_invalid="skip")
        == 2
    )
    with pytest.raises(ValueError, match="on_invalid"):
        store.add_trajectories([GOOD], [1.0], ["a"], on_invalid="ignore")


@pytest.mark.parametrize(
    ("columns", "kwargs", "missing"),
    [
        (["trajectory", "reward"], {}, "question_id"),
        (["text", "reward", "question_id"], {}, "trajectory"),
        (["trajectory", "score", "question_id"], {"reward_column": "reward"}, "reward"),
        (["trajectory", "reward", "question_id"], {"source_column": "origin"}, "origin"),
    ],
)
def test_dataset_missing_columns(make_store, columns, kwargs, missing):
    store = make_store()
    ds = Dataset.from_dict(
        {c: [GOOD if c in ("trajectory", "text") else ("q" if "question" in c else 1.0)] for c in columns}
    )
    with pytest.raises(ValueError, match=rf"lacks column\(s\) \['{missing}'\]; it has"):
        store.add_from_dataset(ds, **kwargs)
    assert len(store) == 0


def test_record_dataset_missing_columns(tmp_path):
    with pytest.raises(ValueError, match=r"trace-record dataset lacks column\(s\) \['value'"):
        TraceStore.from_dataset(
            Dataset.from_dict({"key": ["k"]}), tmp_path / "s", embedder=HashingEmbedder(8)
        )


def test_question_dataset_missing_column(make_store):
    with pytest.raises(ValueError, match=r"question dataset lacks column\(s\) \['prompt'\]"):
        make_store().build_from_agent(lambda p: GOOD, Dataset.from_dict({"q": ["x"]}), lambda **_: [1.0])


@pytest.mark.parametrize(
    ("other", "pattern"),
    [
        (
            HashingEmbedder(128, name="some-other-model"),
            r"'test-hashing-128' \(dimension 128\).*'some-other-model'",
        ),
        (
            HashingEmbedder(64, name="test-hashing-128"),
            r"dimension 128\), but embedder 'test-hashing-128' \(dimension 64\)",
        ),
    ],
)
def test_mismatched_embedder_is_refused(make_store, trajectory, other, pattern):
    store = make_store()
    store.add_trajectories([trajectory()], [1.0], ["q"])
    with pytest.raises(EmbedderMismatchError, match=pattern):
        make_store(embedder_=other)
    assert len(make_store()) == 2  # still opens with the right embedder, records intact


def test_foreign_collection_is_refused(tmp_path, embedder):
    from rapo_trl.store.backend import open_persistent_client

    open_persistent_client(tmp_path / "s").create_collection("foreign", embedding_function=None)
    with pytest.raises(EmbedderMismatchError, match="not created by a rapo_trl TraceStore"):
        TraceStore(tmp_path / "s", collection="foreign", embedder=embedder)


def test_embedder_returning_wrong_shape(make_store):
    liar = CallableEmbedder(lambda texts: [[1.0, 0.0, 0.0]] * len(texts), name="liar", dimension=3)
    liar.dimension = 4  # claims 4, returns 3
    store = make_store(embedder_=liar)
    with pytest.raises(ValueError, match="returned shape"):
        store.add_trajectories([GOOD], [1.0], ["q"])
    assert len(store) == 0


def test_bad_collection_name(tmp_path, embedder):
    with pytest.raises(ValueError, match="Invalid trace store collection name 'x'"):
        TraceStore(tmp_path / "s", collection="x", embedder=embedder)


def test_corrupt_database_is_refused_and_left_untouched(tmp_path, embedder):
    path = tmp_path / "corrupt"
    path.mkdir()
    (path / "chroma.sqlite3").write_bytes(b"this is not a database" * 10)
    with pytest.raises(CorruptStoreError, match="not an SQLite database"):
        TraceStore(path, embedder=embedder)
    assert (path / "chroma.sqlite3").read_bytes() == b"this is not a database" * 10


def test_damaged_sqlite_database_is_refused(tmp_path, embedder):
    path = tmp_path / "damaged"
    path.mkdir()
    (path / "chroma.sqlite3").write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    with pytest.raises(CorruptStoreError, match="Cannot open the trace store"):
        TraceStore(path, embedder=embedder)


def test_path_that_is_a_file(tmp_path, embedder):
    (tmp_path / "file").write_text("x")
    with pytest.raises(StorePathError, match="is a file, not a directory"):
        TraceStore(tmp_path / "file", embedder=embedder)
    with pytest.raises(StorePathError, match="Cannot create the trace store directory"):
        TraceStore(tmp_path / "file" / "store", embedder=embedder)


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_directory(tmp_path, embedder):
    path = tmp_path / "readonly"
    path.mkdir()
    path.chmod(0o500)
    try:
        with pytest.raises(StorePathError, match="not writable"):
            TraceStore(path, embedder=embedder)
    finally:
        path.chmod(0o700)


def test_bad_config_values():
    for field, value in (("top_k", 0), ("key_max_chars", 0), ("write_batch_size", 0), ("hnsw_space", "dot")):
        with pytest.raises(ValueError, match=field.split("_")[0]):
            StoreConfig(**{field: value})


def test_precomputed_embeddings_of_the_wrong_shape(make_store):
    from rapo_trl.store import step_records

    store = make_store()
    records = step_records(GOOD, 1.0, "q")
    import numpy as np

    with pytest.raises(ValueError, match=r"embeddings of shape \(2, 5\) for 2 records"):
        store.add_records(records, embeddings=np.zeros((2, 5)))
    assert len(store) == 0


def test_a_hashing_store_built_without_bigrams_is_not_opened_by_one_with_them(tmp_path):
    """Bigrams change every vector: the two hashing embedders have names of their own, so the store refuses the other."""
    with TraceStore(tmp_path / "store", embedder=HashingEmbedder(64, bigrams=False)):
        pass
    with pytest.raises(EmbedderMismatchError, match="'hashing-bow-64-unigrams' \\(dimension 64\\), but embedder "
                                                    "'hashing-bow-64'"):
        TraceStore(tmp_path / "store", embedder=HashingEmbedder(64))
