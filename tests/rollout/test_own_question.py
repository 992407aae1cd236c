"""The engine and a row's own question: each retrieval records the stored step's question, and with
``retrieve_own_question`` the store is asked for the row's question's records, when it can take question ids."""

from __future__ import annotations

import logging

import pytest

from rapo_trl.rollout.engine import takes_question_ids
from tests.helpers.fakes import FixedStore, Found, make_engine
from tests.helpers.scripted import Turn


class QuestionStore:
    """Answers each context with a step of the question it was asked for (or of ``other`` when asked for none)."""

    def __init__(self):
        self.asked: list[list[str | None] | None] = []

    def select(self, contexts, question_ids=None):
        self.asked.append(question_ids)
        return [Found("<think>a stored step</think>", question_id=q or "other") for q in question_ids or [None] * len(contexts)]


def script():
    return [Turn("<python>1</python>"), Turn("<answer>7</answer>")]


@pytest.mark.parametrize("option", [True, False])
def test_the_store_is_asked_for_the_rows_own_question_only_with_the_option(tiny_model, option):
    store = QuestionStore()
    engine, prompts, _ = make_engine(tiny_model, [script(), script(), script()], store=store,
                                     retrieve_own_question=option)
    rows = engine.run(prompts, hybrid=[True, False, True], question_ids=["q0", "q1", None])
    # one retrieval, after the tool step, of the two hybrid rows; row 2 has no question id
    assert store.asked == ([["q0", None]] if option else [None])
    assert [[e.question_id for e in row.retrievals] for row in rows] == [["q0" if option else "other"], [], ["other"]]


def test_no_question_ids_are_sent_when_no_row_has_one(tiny_model):
    store = QuestionStore()
    engine, prompts, _ = make_engine(tiny_model, [script(), script()], store=store, retrieve_own_question=True)
    engine.run(prompts[:1], hybrid=[True], question_ids=[None])
    engine.run(prompts[1:], hybrid=[True])
    assert store.asked == [None, None]


def test_a_store_without_question_ids_still_serves_the_option_by_similarity(tiny_model, caplog):
    store = FixedStore()  # select(contexts) only; its results carry no question id
    assert not takes_question_ids(store) and takes_question_ids(QuestionStore())
    engine, prompts, _ = make_engine(tiny_model, [script(), script()], store=store, retrieve_own_question=True)
    with caplog.at_level(logging.WARNING):
        first, second = engine.run(prompts, hybrid=[True, True], question_ids=["q0", "q1"])
    assert len(store.queries) == 1 and first.retrievals and first.retrievals[0].question_id is None
    assert sum("takes no question_ids" in r.getMessage() for r in caplog.records) == 1


def test_question_ids_must_match_the_rows(tiny_model):
    engine, prompts, _ = make_engine(tiny_model, [script()], store=QuestionStore())
    with pytest.raises(ValueError, match="1 question ids for 2 rows|2 question ids for 1 rows"):
        engine.run(prompts, hybrid=[True], question_ids=["a", "b"])
