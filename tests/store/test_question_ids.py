"""One question id for one question, whichever way its trajectories reach the store: a store built from the training
rows' prompts (a plain list, ids made from the text) holds each question under the id ``to_rapo_rows`` gives its row,
so that retrieval of a row's own question finds it in a real Chroma store."""

from __future__ import annotations

from datasets import Dataset

from rapo_trl.tasks import question_id_of, to_rapo_rows
from rapo_trl.trainer.store_growth import _question_id

APPLES = "Tom has 3 apples and buys 4 more. How many apples does Tom have?"
PEARS = "Tom has 3 apples and buys 5 more. How many apples does Tom have?"
ANSWERS = {APPLES: "7", PEARS: "8"}
# A row of the apples question whose policy wrote the pears trajectory's first step, word for word
QUERY = APPLES + "\n<think>Add the two counts.</think>\n<python>print(3 + 5)</python>\n<result>\n8\n</result>\n"


def _agent(prompt):
    """An expert writing each question's trajectory; the pears one's first step is the query's."""
    question = prompt[-1]["content"]
    first = "Add 3 and 4." if question == APPLES else "Add the two counts."
    total = ANSWERS[question]
    return (f"<think>{first}</think>\n<python>print(3 + {int(total) - 3})</python>\n<result>\n{total}\n</result>\n"
            f"<answer>\\boxed{{{total}}}</answer>")


def _rows():
    return to_rapo_rows(Dataset.from_list([{"question": q, "answer": a} for q, a in ANSWERS.items()]), tools=[])


def test_a_store_built_from_the_rows_prompts_finds_each_rows_own_question(make_store):
    rows = _rows()
    store = make_store(top_k=3)
    store.build_from_agent(_agent, list(rows["prompt"]), lambda completions, **_: [1.0] * len(completions),
                           num_samples=1, keep_top_k=1)
    assert {m["question_id"] for page in store.iter_batches() for m in page["metadatas"]} == set(rows["question_id"])
    (alone,) = store.select([QUERY])
    assert "boxed{8}" in alone.text  # similarity alone: the near-identical question's answer
    (own,) = store.select([QUERY], question_ids=[rows[0]["question_id"]])
    assert own.text == "<answer>\\boxed{7}</answer>"


def test_a_row_grown_into_the_store_without_an_id_is_stored_under_the_id_its_question_gets():
    row = _rows()[0]
    assert _question_id({"prompt": row["prompt"]}, row["prompt"]) == row["question_id"] == question_id_of(APPLES)


def test_a_dataset_row_whose_question_id_is_missing_is_stored_under_the_id_its_question_gets(make_store):
    questions = Dataset.from_list([{"prompt": APPLES, "question_id": "apples"}, {"prompt": PEARS, "question_id": None},
                                   {"prompt": "How many pears are left?", "question_id": None}])
    store = make_store()
    store.build_from_agent(lambda prompt: f"<think>{prompt}</think><answer>7</answer>", questions,
                           lambda completions, **_: [1.0] * len(completions), num_samples=1, keep_top_k=1)
    stored = {m["question_id"] for page in store.iter_batches() for m in page["metadatas"]}
    # as to_rapo_rows names a row without an id: each question its own id, none merged into one called "None"
    assert stored == {"apples", question_id_of(PEARS), question_id_of("How many pears are left?")}
