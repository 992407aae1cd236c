"""``select`` with question ids: a real embedded Chroma store holding two questions whose contexts differ in one
number. Similarity alone hands a row the other question's step; asked with the row's question id, the store keeps to
that question's records where it has any, and falls back to similarity where it has none."""

from __future__ import annotations

import pytest

APPLES = "Tom has 3 apples and buys 4 more. How many apples does Tom have?"
PEARS = "Tom has 3 apples and buys 5 more. How many apples does Tom have?"
TRAJECTORIES = {
    "q-apples": "<think>Add 3 and 4.</think>\n<python>print(3 + 4)</python>\n<result>\n7\n</result>\n"
                "<answer>\\boxed{7}</answer>",
    "q-pears": "<think>Add the two counts.</think>\n<python>print(3 + 5)</python>\n<result>\n8\n</result>\n"
               "<answer>\\boxed{8}</answer>",
}
# A row of the apples question whose policy wrote the pears trajectory's first step, word for word
QUERY = APPLES + "\n<think>Add the two counts.</think>\n<python>print(3 + 5)</python>\n<result>\n8\n</result>\n"


@pytest.fixture(params=[None, "exact"], ids=["chroma", "local-index"])
def two_questions(request, make_store):
    store = make_store(local_index=request.param, top_k=3)
    ids = list(TRAJECTORIES)
    store.add_trajectories([TRAJECTORIES[q] for q in ids], [1.0, 1.0], ids, prompts=[APPLES, PEARS])
    return store


def test_similarity_alone_returns_the_other_question_and_the_option_the_rows_own(two_questions):
    (alone,) = two_questions.select([QUERY])
    assert alone.question_id == "q-pears" and "boxed{8}" in alone.text  # the near-identical question's answer
    (own,) = two_questions.select([QUERY], question_ids=["q-apples"])
    assert own.question_id == "q-apples" and own.text == "<answer>\\boxed{7}</answer>"
    assert own.step_index == alone.step_index == 1  # the same point of the reasoning, of the row's own question


def test_each_query_keeps_to_its_own_question_in_one_batch(two_questions):
    found = two_questions.select([QUERY, QUERY, QUERY, APPLES + "\n"],
                                 question_ids=["q-apples", None, "q-unknown", "q-pears"])
    # own question; no id: similarity; a question the store lacks: similarity; the plan query of another question
    assert [f.question_id for f in found] == ["q-apples", "q-pears", "q-pears", "q-pears"]
    assert found[3].step_index == 0 and "3 + 5" in found[3].text


def test_question_ids_must_match_the_contexts(two_questions):
    with pytest.raises(ValueError, match="1 question ids for 2 queries"):
        two_questions.select([QUERY, QUERY], question_ids=["q-apples"])
