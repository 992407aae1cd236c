"""Building a store: trajectories, datasets, an off-policy agent, online growth, stats."""

from __future__ import annotations

import math

import numpy as np
import pytest
from datasets import Dataset


def test_add_trajectories_keeps_top_k_per_question(trajectory, make_store):
    store = make_store()
    trajectories = [trajectory(str(i), tools=1) for i in range(4)] + [trajectory("x", tools=2)]
    rewards = [0.1, 0.9, 0.5, 0.9, 1.0]
    added = store.add_trajectories(
        trajectories, rewards, ["q1"] * 4 + ["q2"], keep_top_k=2, prompts=["What is 12*7?"] * 4 + ["Other?"]
    )
    # q1 keeps rewards 0.9 (row 1) and 0.9 (row 3) -> 2 steps each; q2 keeps its 3-step trajectory
    assert added == 2 * 2 + 3 == len(store)
    rows = store.to_dataset(include_embeddings=False)
    assert sorted(set(rows["reward"])) == [0.9, 1.0]
    assert {(q, s) for q, s in zip(rows["question_id"], rows["source"])} == {
        ("q1", "offline"),
        ("q2", "offline"),
    }
    first = [k for k, i in zip(rows["key"], rows["step_index"]) if i == 0]
    assert set(first) == {"What is 12*7?", "Other?"}


def test_re_adding_stores_and_embeds_nothing_twice(trajectory, make_store, embedder):
    store = make_store()
    args = ([trajectory("1"), trajectory("2")], [1.0, 0.5], ["q1", "q1"])
    assert store.add_trajectories(*args) == 4
    embedder.calls.clear()
    assert store.add_trajectories(*args) == 0
    assert len(store) == 4 and embedder.calls == []


def test_duplicate_trajectories_count_once_for_top_k(trajectory, make_store):
    store = make_store()
    same = trajectory("1")
    store.add_trajectories([same, same, trajectory("2")], [1.0, 1.0, 0.5], ["q"] * 3, keep_top_k=2)
    assert len(store) == 4  # two distinct trajectories, two steps each


def test_writes_in_batches_without_splitting_questions(trajectory, make_store, embedder):
    store = make_store(write_batch_size=5)
    texts = [trajectory(str(i), tools=1) for i in range(6)]
    store.add_trajectories(texts, [1.0] * 6, ["a", "a", "b", "b", "c", "c"], keep_top_k=None)
    assert len(store) == 12 and embedder.calls == [4, 4, 4]


def test_add_from_dataset(trajectory, make_store):
    store = make_store()
    ds = Dataset.from_dict(
        {
            "trajectory": [trajectory("1"), trajectory("2"), trajectory("3")],
            "reward": [1.0, 0.0, 0.7],
            "question_id": ["q1", "q1", "q2"],
            "prompt": [[{"role": "system", "content": "SYS"}, {"role": "user", "content": "Question one?"}]]
            * 2
            + [[{"role": "user", "content": "Question two?"}]],
            "origin": ["expert", "expert", "weak"],
        }
    )
    assert store.add_from_dataset(ds, keep_top_k=1, source_column="origin") == 4
    stats = store.stats()
    assert stats["sources"] == {"expert": 2, "weak": 2} and stats["questions"] == 2
    keys = store.to_dataset(include_embeddings=False)["key"]
    assert "Question one?" in keys and not any("SYS" in k for k in keys)


def test_add_from_dataset_keeps_top_k_per_question_over_all_sources(trajectory, make_store):
    store = make_store()
    ds = Dataset.from_dict(
        {
            "trajectory": [trajectory("1"), trajectory("2"), trajectory("3"), trajectory("4")],
            "reward": [0.2, 1.0, 0.5, 0.9],
            "question_id": ["q", "q", "q", "r"],
            "prompt": ["Q?", "Q?", "Q?", "R?"],
            "origin": ["weak", "expert", "weak", "weak"],
        }
    )
    assert store.add_from_dataset(ds, keep_top_k=1, source_column="origin") == 4
    rows = store.to_dataset(include_embeddings=False)
    kept = set(zip(rows["question_id"], rows["source"], rows["reward"]))
    assert kept == {("q", "expert", 1.0), ("r", "weak", 0.9)}


def test_build_from_agent_callable(trajectory, make_store):
    store = make_store()
    calls = []

    def agent(prompt):
        calls.append(prompt)
        return trajectory(str(len(calls) % 3))

    def reward_fn(prompts, completions, answer, **kwargs):
        return [1.0 if f"{{{a}}}" in c else 0.0 for c, a in zip(completions, answer)]

    questions = Dataset.from_dict({"prompt": ["P0", "P1"], "question_id": ["a", "b"], "answer": ["1", "2"]})
    added = store.build_from_agent(agent, questions, reward_fn, num_samples=4, keep_top_k=2)
    assert len(calls) == 8 and added == len(store) > 0
    rows = store.to_dataset(include_embeddings=False)
    assert set(rows["source"]) == {"agent"} and set(rows["question_id"]) == {"a", "b"}
    # per question: the rewarded trajectory first, then the best of the rest
    assert max(r for r, q in zip(rows["reward"], rows["question_id"]) if q == "a") == 1.0
    # resuming skips finished questions: the agent is not called again
    assert store.build_from_agent(agent, questions, reward_fn, num_samples=4) == 0 and len(calls) == 8


def test_build_from_agent_sampler_and_skips_malformed_samples(trajectory, make_store, caplog):
    class Sampler:
        def sample_trajectories(self, prompts, num_samples):
            return [[trajectory("7"), "", "no tags at all", trajectory("8")][:num_samples] for _ in prompts]

    store = make_store()
    added = store.build_from_agent(
        Sampler(),
        ["What is 7?", "What is 8?"],
        lambda prompts, completions, **_: [0.5 for _ in completions],
        num_samples=4,
        keep_top_k=5,
    )
    assert added == 8  # 2 questions x 2 valid trajectories x 2 steps
    assert "Skipped 4 malformed" in caplog.text


def test_build_from_agent_rejects_a_bad_sampler(trajectory, make_store):
    class Short:
        def sample_trajectories(self, prompts, num_samples):
            return [[trajectory()] for _ in prompts]

    store = make_store()
    with pytest.raises(ValueError, match="expected 3 each"):
        store.build_from_agent(Short(), ["q"], lambda **_: [], num_samples=3)
    with pytest.raises(TypeError, match="callable"):
        store.build_from_agent(42, ["q"], lambda **_: [], num_samples=1)
    assert len(store) == 0


def test_online_growth_adds_the_best_policy_trajectory(trajectory, make_store):
    store = make_store()
    added = store.add_policy_trajectories(
        prompts=["Q1"] * 3 + ["Q2"] * 2,
        completions=[trajectory("1"), trajectory("2"), "broken", trajectory("3"), trajectory("4")],
        rewards=[0.4, 0.8, 5.0, 0.0, math.nan],
        question_ids=["q1"] * 3 + ["q2"] * 2,
    )
    rows = store.to_dataset(include_embeddings=False)
    assert added == 2 and set(rows["reward"]) == {0.8} and set(rows["source"]) == {"policy"}


def test_stats(trajectory, make_store):
    store = make_store()
    store.add_trajectories([trajectory("1", tools=2), trajectory("2")], [1.0, -1.0], ["q1", "q2"])
    stats = store.stats(bins=2)
    assert stats["records"] == len(store) == 5 and stats["trajectories"] == 2 and stats["questions"] == 2
    assert stats["reward_histogram"]["counts"] == [2, 3] and stats["embedder"] == "test-hashing-128"
    assert stats["dimension"] == 128 and stats["folder_bytes"] > 0 and stats["index"]["space"] == "cosine"


def test_stats_names_its_disk_size_as_the_whole_folder_and_who_shares_it(trajectory, make_store, tmp_path):
    """Chroma keeps every collection of a folder in one database, so a collection's own bytes cannot be counted: the
    size reported is the folder's, named so and with the collections that share it, not a figure that grows with
    another collection's writes (or any file put there) while passing for this store's."""
    from rapo_trl.store.backend import directory_size

    rl = make_store("shared")
    rl.add_trajectories([trajectory("1", tools=2)], [1.0], ["q1"], prompts=["What is 12*7?"])
    warm = make_store("shared", collection="warm")
    warm.add_trajectories([trajectory(str(i)) for i in range(20)], [1.0] * 20, [f"q{i}" for i in range(20)],
                          prompts=["What is 12*7?"] * 20)
    (tmp_path / "shared" / "notes.bin").write_bytes(b"x" * 100_000)
    stats = rl.stats()
    assert "size_bytes" not in stats
    assert stats["folder_bytes"] == directory_size(tmp_path / "shared") > 100_000
    assert stats["folder_collections"] == ["traces", "warm"] == warm.stats()["folder_collections"]


def test_describe_names_the_store_and_counts_its_records(trajectory, make_store, tmp_path):
    """What a training checkpoint records about the store it drew from (rapo_state_*.json)."""
    import json

    store = make_store("described", collection="mine")
    assert store.describe() == {"location": str(tmp_path / "described"), "server": False, "collection": "mine",
                                "records": 0, "embedder": "test-hashing-128"}
    store.add_trajectories([trajectory("1", tools=2), trajectory("2")], [1.0, -1.0], ["q1", "q2"])
    assert store.describe()["records"] == len(store) == 5
    assert json.loads(json.dumps(store.describe())) == store.describe()


class _RandomSampler:
    """A batched sampler drawing from the global RNG, like a model sampling with torch's."""

    def sample_trajectories(self, prompts, num_samples):
        import random

        return [
            [f"<python>print({random.randint(0, 9)})</python><result>r</result><answer>{p}</answer>"
             for _ in range(num_samples)]
            for p in prompts
        ]  # fmt: skip


def _record_ids(store):
    return sorted(i for page in store.iter_batches(include=()) for i in page["ids"])


@pytest.mark.parametrize("seed", [7, None])
def test_a_resumed_build_is_identical_to_an_uninterrupted_one_when_seeded(make_store, seed):
    questions = [f"question {i}" for i in range(12)]

    def build(store, subset):
        return store.build_from_agent(
            _RandomSampler(), subset, lambda completions, **_: [1.0] * len(completions),
            num_samples=4, keep_top_k=2, questions_per_batch=4, seed=seed,
        )  # fmt: skip

    import random

    random.seed(0)
    whole = make_store("whole")
    build(whole, questions)
    random.seed(0)
    resumed = make_store("resumed")
    build(resumed, questions[:5])  # "killed" after 5 questions
    random.seed(0)  # the resumed process starts its RNG afresh, and its batches differ
    build(resumed, questions)
    assert len(resumed) == len(whole)
    if seed is None:  # unseeded batched sampling draws differently once the batches change
        assert _record_ids(resumed) != _record_ids(whole)
    else:
        assert _record_ids(resumed) == _record_ids(whole)


@pytest.mark.parametrize("result", [lambda n: 1.0, lambda n: "1" * n, lambda n: {"reward": 1.0},
                                    lambda n: np.ones((n, 1))])
def test_build_from_agent_refuses_a_reward_fn_that_returns_no_reward_per_completion(result, trajectory, make_store):
    """A single number, text, a mapping or a column of shape (n, 1) is named, not iterated into n rewards that are
    each skipped as malformed (a build of 0 records behind a warning about NaN rewards) or a bare TypeError."""
    store = make_store()
    with pytest.raises(TypeError, match="one reward per completion"):
        store.build_from_agent(lambda prompt: trajectory(), ["What is 7?"],
                               lambda prompts, completions, **_: result(len(completions)), num_samples=2)
    assert len(store) == 0


def test_build_from_agent_names_why_samples_were_skipped(trajectory, make_store, caplog):
    store = make_store()
    added = store.build_from_agent(lambda prompt: trajectory(), ["What is 7?"],
                                   lambda prompts, completions, **_: [None] * len(completions), num_samples=2)
    assert added == 0
    assert "Skipped 2 malformed" in caplog.text and "reward is None, not a number" in caplog.text


def test_build_from_agent_takes_numpy_rewards(trajectory, make_store):
    store = make_store()
    rewards = lambda prompts, completions, **_: np.linspace(0.5, 1.0, len(completions), dtype=np.float32)  # noqa: E731
    answers = iter(["1", "2"])
    assert store.build_from_agent(lambda prompt: trajectory(next(answers)), ["What is 7?"], rewards, num_samples=2) > 0
    assert set(store.to_dataset(include_embeddings=False)["reward"]) == {0.5, 1.0}


def test_trajectories_stored_without_their_prompts_are_warned_about(trajectory, make_store, caplog):
    """A dataset of the default columns alone (trajectory, reward, question_id) keys every first step with the empty
    text, whatever its question: that is said, not left to retrieve unrelated first steps."""
    store = make_store()
    ds = Dataset.from_dict({"trajectory": [trajectory("1"), trajectory("2", topic="find the capital of Peru")],
                            "reward": [1.0, 1.0], "question_id": ["q1", "q2"]})
    assert store.add_from_dataset(ds) == 4
    assert "without their prompts" in caplog.text
    assert set(store.to_dataset(include_embeddings=False).filter(lambda row: row["step_index"] == 0)["key"]) == {""}
    caplog.clear()
    store.add_from_dataset(ds.add_column("prompt", ["What is 12*7?", "Capital of Peru?"]))
    assert "without their prompts" not in caplog.text


def test_a_trajectory_sampled_twice_is_stored_at_its_best_reward():
    """A reward that is not a function of the text alone (an environment's, a judge's) can score one text twice
    differently: it is kept once, at its best reward, and ranked there."""
    from rapo_trl.store.ingest import Trajectory, keep_top_k

    rows = [Trajectory("same", 0.0, "q"), Trajectory("other", 0.5, "q"), Trajectory("same", 1.0, "q"),
            Trajectory("third", 0.2, "q"), Trajectory("alone", 0.3, "r")]
    assert [(row.text, row.reward) for row in keep_top_k(rows, 2)] == [("same", 1.0), ("other", 0.5), ("alone", 0.3)]
    assert [(row.text, row.reward) for row in keep_top_k(rows, None)] == [
        ("same", 1.0), ("other", 0.5), ("third", 0.2), ("alone", 0.3)]


class _Killed(Exception):
    """Stands for the SIGKILL that ends a build between two of its writes to Chroma."""


def test_a_build_killed_between_writes_resumes_to_every_record_of_a_question_larger_than_a_write_batch(
        trajectory, make_store):
    # Each question keeps 2 trajectories of 3 steps: 6 records, more than a write batch of 4. Were a question split
    # across writes, the kill could leave part of its records, and the resume would skip it as done.
    questions = Dataset.from_dict({"prompt": ["P0", "P1", "P2"], "question_id": ["a", "b", "c"]})

    drawn = []

    def agent(prompt):
        drawn.append(prompt)
        return trajectory(f"{prompt}-{len(drawn) % 2}", tools=2)  # the two samples of a question differ

    def build(store):
        return store.build_from_agent(agent, questions, lambda completions, **_: [1.0] * len(completions),
                                      num_samples=2, keep_top_k=2, questions_per_batch=3)

    whole = make_store("whole", write_batch_size=4)
    build(whole)
    killed = make_store("killed", write_batch_size=4)
    write_batch = killed._write_batch

    def dies_at_the_second_write(*args):
        if killed.collection.count() > 0:
            raise _Killed
        return write_batch(*args)

    killed._write_batch = dies_at_the_second_write
    with pytest.raises(_Killed):
        build(killed)
    assert 0 < len(killed) < len(whole)
    killed.close()
    resumed = make_store("killed", write_batch_size=4)
    build(resumed)
    assert _record_ids(resumed) == _record_ids(whole)


def test_write_batches_hold_whole_questions_and_cut_only_past_chromas_limit():
    from rapo_trl.store.ingest import question_aligned_batches
    from rapo_trl.store.steps import StepRecord

    def records(*counts):
        return [StepRecord(key="k", value="v", reward=1.0, question_id=f"q{question}", step_index=i, num_steps=count,
                           source="s", trajectory_id="t", record_id=f"q{question}-{i}", created_at="")
                for question, count in enumerate(counts) for i in range(count)]

    def slices(counts, size, limit=None):
        return [stop - start for start, stop in question_aligned_batches(records(*counts), size, limit)]

    assert slices([2, 2, 2], 4) == [4, 2]
    assert slices([2, 6, 1, 1], 4) == [2, 6, 2]  # the question of 6 is written in one call, past the size
    assert slices([2, 6, 1], 4, limit=5) == [2, 5, 2]  # cut only where one call could not take it
    assert slices([3, 3], 8, limit=4) == [3, 3]  # no slice past the limit, whatever the size
