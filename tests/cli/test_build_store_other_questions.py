"""A store folder that already holds an earlier build's traces of other questions is refused by `rapo build-store`,
whichever agent fills it: resumed, it would keep those questions beside this build's, and training would retrieve
them."""

from __future__ import annotations

import json

import pytest
from datasets import Dataset

from rapo_trl.cli import build_store, parse_recipe
from rapo_trl.cli.common import UsageError, open_store
from rapo_trl.embeddings import HashingEmbedder

OTHER_QUESTION = "a-question-of-an-earlier-build"


@pytest.fixture(autouse=True)
def hashing_embedder(monkeypatch):
    """Model-free embeddings: these tests are about which questions a store holds, not about similarity."""
    monkeypatch.setattr("rapo_trl.embeddings.default_embedder", lambda: HashingEmbedder())


def _environment_recipe(tmp_path):
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i} * 3?", "answer": str(3 * i)}) + "\n"
                            for i in range(10)))
    return parse_recipe("build-store", ["--task", "dataset", "--dataset_path", str(data),
                                        "--store_path", str(tmp_path / "store"), "--agent", "tiny",
                                        "--environment_factory", "tests.helpers.environments.Counter",
                                        "--sft_warmup_steps", "0", "--use_cpu", "true", "--bf16", "false"])


def _store_with_an_earlier_builds_question(script):
    """What an earlier build by the same agent left in the folder: a trajectory of a question this build lacks."""
    trajectories = Dataset.from_dict({"trajectory": ["<think>count</think>\n<answer>\\boxed{5}</answer>"],
                                      "reward": [1.0], "question_id": [OTHER_QUESTION],
                                      "question": ["Count to five."]})
    with open_store(script, must_exist=False) as store:
        store.add_from_dataset(trajectories, source=f"agent:{script.agent}", tool_tags=["python"])


def test_an_environment_build_refuses_a_store_of_other_questions(tmp_path, monkeypatch):
    script, rapo_args, model_args = _environment_recipe(tmp_path)
    _store_with_an_earlier_builds_question(script)
    filled = []
    monkeypatch.setattr(build_store, "_environment_agent", lambda *args: object())
    monkeypatch.setattr("rapo_trl.store.build_from_environment", lambda store, *args, **kwargs: filled.append(1) or 0)
    with pytest.raises(UsageError, match="already holds agent:tiny's traces of 1 questions that are not of split "
                                         "'train'"):
        build_store.run(script, rapo_args, model_args)
    assert not filled  # refused before a rollout


def test_an_environment_build_resumes_a_store_of_its_own_questions(tmp_path, monkeypatch):
    from rapo_trl.cli.environment import environment_rows

    script, rapo_args, model_args = _environment_recipe(tmp_path)
    own = environment_rows(script, "store")["question_id"][0]
    trajectories = Dataset.from_dict({"trajectory": ["<answer>\\boxed{0}</answer>"], "reward": [1.0],
                                      "question_id": [own], "question": ["What is 0 * 3?"]})
    with open_store(script, must_exist=False) as store:
        store.add_from_dataset(trajectories, source=f"agent:{script.agent}", tool_tags=["python"])
    filled = []
    monkeypatch.setattr(build_store, "_environment_agent", lambda *args: object())
    monkeypatch.setattr("rapo_trl.store.build_from_environment", lambda store, *args, **kwargs: filled.append(1) or 0)
    assert build_store.run(script, rapo_args, model_args)["questions"] == 1
    assert filled


def test_an_environment_build_that_stored_nothing_is_refused_beside_another_sources_records(tmp_path, monkeypatch):
    # Another agent's traces in the folder are no records of this agent for these questions: the empty build is
    # refused, as a tool-task build is, rather than counted by the store's every record.
    script, rapo_args, model_args = _environment_recipe(tmp_path)
    trajectories = Dataset.from_dict({"trajectory": ["<answer>\\boxed{5}</answer>"], "reward": [1.0],
                                      "question_id": [OTHER_QUESTION], "question": ["Count to five."]})
    with open_store(script, must_exist=False) as store:
        store.add_from_dataset(trajectories, source="agent:another-model", tool_tags=["python"])
    monkeypatch.setattr(build_store, "_environment_agent", lambda *args: object())
    monkeypatch.setattr("rapo_trl.store.build_from_environment", lambda store, *args, **kwargs: 0)
    with pytest.raises(UsageError, match="the store got no step records from agent 'tiny' on \\d+ questions"):
        build_store.run(script, rapo_args, model_args)
