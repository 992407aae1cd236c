"""No silently empty store: a build that stored nothing fails, and training refuses to retrieve from an empty store
unless retrieval is off or ``allow_empty_store`` says so."""

from __future__ import annotations

import pytest

from rapo_trl.cli import build_store, parse_recipe, train
from rapo_trl.cli.common import UsageError, open_store
from rapo_trl.embeddings import HashingEmbedder


@pytest.fixture(autouse=True)
def hashing_embedder(monkeypatch):
    """Model-free embeddings: these tests are about whether the store holds anything, not about similarity."""
    monkeypatch.setattr("rapo_trl.embeddings.default_embedder", lambda: HashingEmbedder())


def _recipe(command, tmp_path, *overrides):
    return parse_recipe(command, ["--task", "arithmetic", "--train_size", "3", "--store_path", str(tmp_path / "store"),
                                  "--num_samples", "1", "--keep_top_k", "1", *overrides])


def test_a_build_that_stores_nothing_fails_with_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(build_store, "_expert_agent", lambda *args: lambda prompt: "I cannot say.")  # untagged
    with pytest.raises(UsageError, match=r"the store got no step records from agent 'expert' on 3 questions"):
        build_store.run(*_recipe("build-store", tmp_path))


def test_a_build_that_resumes_a_whole_store_adds_nothing_and_succeeds(tmp_path):
    first = build_store.run(*_recipe("build-store", tmp_path))
    again = build_store.run(*_recipe("build-store", tmp_path))
    assert first["added"] > 0 and again["added"] == 0 and again["records"] == first["records"]


def _empty_store(tmp_path):
    script, _, _ = _recipe("build-store", tmp_path)
    open_store(script, must_exist=False).close()  # the collection made, nothing in it


def _train(tmp_path, tiny_model_dir, *overrides):
    return _recipe("train", tmp_path, "--model_name_or_path", str(tiny_model_dir), "--output_dir",
                   str(tmp_path / "model"), "--use_cpu", "--bf16", "false", "--report_to", "none", *overrides)


class _ModelLoaded(Exception):
    """Stands for the rest of training: the store checks are done once the tokenizer loads."""


def test_training_refuses_an_empty_store_before_loading_the_model(tmp_path, tiny_model_dir, monkeypatch):
    _empty_store(tmp_path)
    monkeypatch.setattr("transformers.AutoTokenizer.from_pretrained", _raise_loaded)
    with pytest.raises(UsageError, match=r"collection 'traces'\) is empty, so every retrieval would insert the "
                                         r"fallback text: .*--allow_empty_store"):
        train.run(*_train(tmp_path, tiny_model_dir))


def test_a_retrieve_prob_ramp_from_zero_retrieves_so_an_empty_store_is_refused(tmp_path, tiny_model_dir, monkeypatch):
    # p rises from 0 to 0.5 over the run: retrieval is on, so the store is opened and checked like any other.
    _empty_store(tmp_path)
    monkeypatch.setattr("transformers.AutoTokenizer.from_pretrained", _raise_loaded)
    with pytest.raises(UsageError, match=r"is empty, so every retrieval would insert the fallback text"):
        train.run(*_train(tmp_path, tiny_model_dir, "--retrieve_prob", "0", "--retrieve_prob_final", "0.5"))


@pytest.mark.parametrize("overrides", [["--allow_empty_store"], ["--retrieve_prob", "0"],
                                       ["--num_hybrid_generations", "0"]])
def test_an_empty_store_is_taken_when_allowed_or_unused(tmp_path, tiny_model_dir, monkeypatch, overrides):
    _empty_store(tmp_path)
    monkeypatch.setattr("transformers.AutoTokenizer.from_pretrained", _raise_loaded)
    with pytest.raises(_ModelLoaded):
        train.run(*_train(tmp_path, tiny_model_dir, *overrides))


def _raise_loaded(*args, **kwargs):
    raise _ModelLoaded
