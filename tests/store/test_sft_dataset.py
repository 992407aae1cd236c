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
