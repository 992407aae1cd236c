"""TraceStore.sft_dataset: each RL row's best stored trajectory as a conversational SFT example, as `rapo train`'s SFT
stages imitate it."""

import pytest
from datasets import Dataset

from rapo_trl.store.sft_examples import STEP_SEPARATOR
from tests.store.conftest import trajectory

SOLVED, WRONG, OTHER = "q-solved", "q-wrong", "q-not-stored"


def _prompt(text: str) -> list[dict]:
    return [{"role": "system", "content": "Use tools."}, {"role": "user", "content": text}]


ROWS = [
    {"prompt": _prompt("What is 12*7?"), "question_id": SOLVED, "answer": "84"},
    {"prompt": _prompt("What is 12*8?"), "question_id": WRONG, "answer": "96"},
    {"prompt": _prompt("Capital of Peru?"), "question_id": OTHER, "answer": "Lima"},
]
RIGHT = trajectory("84", tools=2)
FAILED = trajectory("85", tools=1, topic="add twelve and seven")
ALSO_FAILED = trajectory("95", tools=1, topic="multiply twelve by eight")


@pytest.fixture
def store(make_store):
    """Two trajectories of one question (rewards 0 and 1), one of another (reward 0)."""
    store = make_store()
    store.add_trajectories([FAILED, RIGHT, ALSO_FAILED], [0.0, 1.0, 0.0], [SOLVED, SOLVED, WRONG],
                           prompts=["What is 12*7?", "What is 12*7?", "What is 12*8?"])
    return store


def _stored_steps(store, reward: float, question_id: str) -> list[str]:
    """The steps of ``question_id``'s stored trajectory of ``reward``, in their order."""
    records = [r for r in store.to_dataset(include_embeddings=False)
               if r["question_id"] == question_id and r["reward"] == reward]
    return [r["value"] for r in sorted(records, key=lambda r: r["step_index"])]


def test_only_a_question_with_a_solved_trajectory_gives_an_example_of_its_steps_in_order(store):
    dataset = store.sft_dataset(Dataset.from_list(ROWS))
    assert isinstance(dataset, Dataset) and dataset.column_names == ["prompt", "completion"]
    (example,) = dataset
    assert example["prompt"] == ROWS[0]["prompt"]
    assert example["completion"][0]["content"].split() == RIGHT.split()  # the whole trajectory, step by step
    (message,) = example["completion"]
    steps = _stored_steps(store, 1.0, SOLVED)
    assert len(steps) == 3 and "(attempt 0)" in steps[0] and "(attempt 1)" in steps[1]  # two tool steps, the answer
    assert message == {"role": "assistant", "content": STEP_SEPARATOR.join(steps)}


def test_a_lower_bar_takes_each_questions_best_trajectory(store):
    dataset = store.sft_dataset(ROWS, min_reward=0.0)  # a list of dicts as well as a dataset
    by_prompt = {example["prompt"][1]["content"]: example["completion"][0]["content"] for example in dataset}
    assert set(by_prompt) == {"What is 12*7?", "What is 12*8?"}  # the unstored question is left out
    assert by_prompt["What is 12*7?"].split() == RIGHT.split()  # reward 1 over reward 0
    assert by_prompt["What is 12*8?"].split() == ALSO_FAILED.split()


def test_no_row_with_a_qualifying_trajectory_is_an_error_naming_the_collection_and_the_bar(store):
    with pytest.raises(ValueError, match=r"collection 'traces' holds no trajectory with reward >= 1 of any of these "
                                         r"2 questions"):
        store.sft_dataset([ROWS[1], ROWS[2]])
    with pytest.raises(ValueError, match=r"reward >= 2 of any of these 3 questions"):
        store.sft_dataset(ROWS, min_reward=2.0)


def test_records_added_without_a_trajectory_id_are_not_imitated_step_by_step(tmp_path, embedder):
    # Each record of a dataset without trajectory_id counts as a trajectory of its own: imitated, the best of them
    # would have been one step of three, the completion stopping mid-way.
    from rapo_trl.store import StoreConfig, TraceStore

    steps = ["<python>print(12 * 7)</python>\n<result>\n84\n</result>", "<think>Check.</think>",
             "<answer>\\boxed{84}</answer>"]
    records = Dataset.from_list([{"key": f"What is 12*7? {index}", "value": value, "reward": 1.0,
                                  "question_id": SOLVED, "step_index": index, "num_steps": 3}
                                 for index, value in enumerate(steps)])
    store = TraceStore.from_dataset(records, tmp_path / "records", embedder=embedder,
                                    config=StoreConfig(show_progress=False))
    with pytest.warns(UserWarning, match="3 stored trajectories with reward >= 1 miss steps"):
        with pytest.raises(ValueError, match="holds no trajectory with reward >= 1"):
            store.sft_dataset(ROWS[:1])


def test_a_trajectory_missing_a_step_gives_way_to_the_next_best_whole_one(store):
    store.add_trajectories([trajectory("84", tools=1, topic="times seven")], [2.0], [SOLVED],
                           prompts=["What is 12*7?"])
    assert store.delete({"$and": [{"step_index": 1}, {"reward": 2.0}]}) == 1  # the reward-2 trajectory's answer step
    with pytest.warns(UserWarning, match="miss steps"):
        (example,) = store.sft_dataset(ROWS, min_reward=0.5)
    assert example["completion"][0]["content"].split() == [
        word for step in _stored_steps(store, 1.0, SOLVED) for word in step.split()]
