"""Guided retrieval in the engine: a retrieval at the plan boundary, and the span of a retrieved block that is the
stored step's own text (what the retrieved-token loss trains)."""

from __future__ import annotations

import random

import pytest

from rapo_trl.rollout import RolloutConfig
from tests.helpers.fakes import FixedStore, encode, make_engine
from tests.helpers.scripted import Turn

STEP = "<think>reuse x</think>\n<python>x = 2\nprint(x * 3)</python>"
STORED = STEP + "\n<result>\n6\n</result>\n"


def plan_script():
    return [Turn("<think>my plan</think>", 4), Turn("<python>1</python>", 2), Turn("<answer>7</answer>")]


def test_plan_boundary_retrieves_before_the_first_tool_call(tiny_model):
    engine, prompts, tok = make_engine(tiny_model, [plan_script(), plan_script()], store=FixedStore(),
                                       retrieve_at=("plan", "tool_step"))
    hybrid, plain = engine.run(prompts, hybrid=[True, False])
    assert [s.kind for s in hybrid.segments] == ["policy", "retrieved", "policy", "tool", "retrieved", "policy", "end"]
    assert [e.boundary for e in hybrid.retrievals] == ["plan", "tool_step"]
    plan_event = hybrid.retrievals[0]
    assert hybrid.completion_ids[: plan_event.start] == encode(tok, "<think>my plan</think>")
    assert plan_event.entropy_pre is not None and plan_event.entropy_post is not None  # Z has both sides
    # The row that may not retrieve stops at the plan too and goes on in the same step: no forced tokens there.
    assert [s.kind for s in plain.segments] == ["policy", "tool", "policy", "end"]
    assert plain.retrievals == []


def test_plan_retrieval_queries_with_the_context_before_the_plan(tiny_model):
    store = FixedStore()
    engine, prompts, _ = make_engine(tiny_model, [plan_script()], store=store, retrieve_at=("plan", "tool_step"))
    engine.run(prompts, query_prefixes=["QUESTION\n"], hybrid=[True])
    plan_query, tool_query = store.queries[0][0], store.queries[1][0]
    assert plan_query == "QUESTION\n"  # the key of a stored first step: the question, without the policy's plan
    assert tool_query.startswith("QUESTION\n<think>my plan</think>") and "out(1)" in tool_query


def test_plan_only_retrieves_once_and_not_after_tool_steps(tiny_model):
    engine, prompts, _ = make_engine(tiny_model, [plan_script()], store=FixedStore(), retrieve_at=("plan",))
    (row,) = engine.run(prompts, hybrid=[True])
    assert [e.boundary for e in row.retrievals] == ["plan"]


def test_plan_boundary_is_the_first_turns_only(tiny_model):
    script = [Turn("<python>1</python>"), Turn("<think>later</think>"), Turn("<answer>7</answer>")]
    engine, prompts, _ = make_engine(tiny_model, [script], store=FixedStore(), retrieve_at=("plan",))
    (row,) = engine.run(prompts, hybrid=[True])
    assert row.retrievals == []  # the first turn ended at a tool call; a later </think> is no plan boundary


def two_tool_steps():
    return [Turn("<python>1</python>"), Turn("<python>2</python>"), Turn("<answer>7</answer>")]


def test_first_tool_step_retrieves_after_a_rows_first_tool_step_never_its_second(tiny_model):
    store = FixedStore()
    engine, prompts, _ = make_engine(tiny_model, [two_tool_steps(), two_tool_steps()], store=store,
                                     retrieve_at=("first_tool_step",))
    hybrid, plain = engine.run(prompts, hybrid=[True, False])
    assert [s.kind for s in hybrid.segments] == ["policy", "tool", "retrieved", "policy", "tool", "policy", "end"]
    (event,) = hybrid.retrievals
    assert event.boundary == "tool_step" and event.after_step == 0
    assert plain.retrievals == [] and len(store.queries) == 1
    # one draw in all, the hybrid row's at its first tool step: its second draws nothing
    drawn = random.Random(0)
    drawn.random()
    assert engine.rng.random() == drawn.random()


def test_first_tool_step_beside_the_plan_retrieves_at_each_once(tiny_model):
    script = [Turn("<think>my plan</think>", 4), *two_tool_steps()]
    engine, prompts, _ = make_engine(tiny_model, [script], store=FixedStore(),
                                     retrieve_at=("plan", "first_tool_step"))
    (row,) = engine.run(prompts, hybrid=[True])
    assert [e.boundary for e in row.retrievals] == ["plan", "tool_step"]
    assert [s.kind for s in row.segments] == ["policy", "retrieved", "policy", "tool", "retrieved", "policy", "tool",
                                              "policy", "end"]


def test_no_plan_stop_without_retrieval(tiny_model):
    # Outside training (or with p = 0) the first turn is not cut at the plan: the rollout is plain on-policy.
    engine, prompts, _ = make_engine(tiny_model, [[Turn("<think>my plan</think><python>1</python>"), Turn("end")]],
                                     store=FixedStore(), retrieve_at=("plan",))
    (row,) = engine.run(prompts, hybrid=[True], retrieval_enabled=False)
    assert [s.kind for s in row.segments][:2] == ["policy", "tool"]


def test_step_tokens_are_the_stored_steps_own_text(tiny_model):
    engine, prompts, tok = make_engine(tiny_model, [[Turn("<python>1</python>"), Turn("<answer>7</answer>")]],
                                       store=FixedStore(text=STORED))
    (row,) = engine.run(prompts, hybrid=[True])
    (event,) = row.retrievals
    block = engine.config.retrieve_template.format(text=STORED)
    assert row.completion_ids[event.start : event.end] == encode(tok, block)  # the block's one encoding
    start, end = event.step_tokens
    assert event.start < start < end < event.end
    assert tok.decode(row.completion_ids[start:end]).strip() == STEP  # no preface, tags or tool result


def test_fallback_text_has_no_step_tokens(tiny_model):
    engine, prompts, _ = make_engine(tiny_model, [[Turn("<python>1</python>"), Turn("end")]],
                                     store=FixedStore(text="Reason on your own.", fallback=True))
    (row,) = engine.run(prompts, hybrid=[True])
    assert row.retrievals[0].step_tokens is None


def test_unknown_boundary_is_refused():
    with pytest.raises(ValueError, match="retrieve_at"):
        RolloutConfig(retrieve_at=("after_answer",))


def test_a_later_query_reads_a_retrieved_block_as_the_stored_step_alone(tiny_model):
    store = FixedStore(text=STORED)
    engine, prompts, _ = make_engine(tiny_model, [plan_script()], store=store, retrieve_at=("plan", "tool_step"))
    (row,) = engine.run(prompts, query_prefixes=["QUESTION\n"], hybrid=[True])
    tool_query = store.queries[1][0]
    assert row.retrievals[0].text == STORED
    assert tool_query.startswith("QUESTION\n<think>my plan</think>" + STORED)  # as an agent's context reads
    assert "Additional context" not in tool_query and "<retrieve>" not in tool_query
    assert "out(1)" in tool_query  # the policy's own step after it is still there
