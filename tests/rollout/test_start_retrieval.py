"""A retrieval at the start (``retrieve_at: start``): a hybrid row's completion begins with a stored first step, as a
``<retrieve>`` block or, with ``retrieved_step_as_own``, as the policy's own step (a prefix rollout); the rows that
do not retrieve there are the rows they would be without it."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import AutoModelForCausalLM

from rapo_trl.protocol import OWN_STEP_TEMPLATE, RETRIEVE_PREFACE, encode_retrieved_block
from rapo_trl.rewards.view import policy_view
from rapo_trl.rollout import HybridRolloutEngine, RolloutConfig, TransformersBackend
from tests.helpers.fakes import EchoTool, FixedStore, encode, make_engine, prompts_for
from tests.helpers.scripted import Turn

STEP = "<think>reuse x</think>\n<python>x = 2\nprint(x * 3)</python>"
STORED = STEP + "\n<result>\n6\n</result>"
"""A stored first step as the store holds it (``step_records`` strips it): the step and its tool result."""
ANSWER_STEP = "<think>it is 7</think>\n<answer>7</answer>"


def after_the_stored_step():
    return [Turn("<python>1</python>", 4), Turn("<answer>7</answer>")]


def start_engine(tiny_model, store, rows=2, **config):
    return make_engine(tiny_model, [after_the_stored_step() for _ in range(rows)], store=store,
                       retrieve_at=("start",), **config)


@pytest.mark.parametrize("as_own", [False, True])
def test_a_hybrid_row_begins_with_the_stored_step(tiny_model, as_own):
    store = FixedStore(text=STORED)
    engine, prompts, tok = start_engine(tiny_model, store, retrieved_step_as_own=as_own)
    hybrid, plain = engine.run(prompts, query_prefixes=["QUESTION 0\n", "QUESTION 1\n"], hybrid=[True, False])
    (event,) = hybrid.retrievals
    block = STORED + "\n" if as_own else engine.config.retrieve_template.format(text=STORED)
    assert hybrid.completion_ids[: event.end] == encode(tok, block)  # the block's one encoding, first
    assert (event.boundary, event.start, event.after_step, event.as_own) == ("start", 0, -1, as_own)
    assert [s.kind for s in hybrid.segments] == ["retrieved", "policy", "tool", "policy", "end"]
    shown = tok.decode(hybrid.completion_ids[: event.end])
    assert (RETRIEVE_PREFACE in shown and "<retrieve>" in shown) is not as_own
    start, end = event.step_tokens
    assert tok.decode(hybrid.completion_ids[start:end]).strip() == STEP  # the step's own text, no tool result
    assert "<result>" in tok.decode(hybrid.completion_ids[end : event.end])
    # no step before it; the step after it is the policy's first, which Z would compare with nothing
    assert event.entropy_pre is None and event.entropy_post == hybrid.policy_steps[0].entropy
    assert store.queries == [["QUESTION 0\n"]]  # with the question alone, as a stored first step is keyed
    assert plain.retrievals == [] and [s.kind for s in plain.segments] == ["policy", "tool", "policy", "end"]


@pytest.mark.parametrize("text, own", [(STORED, STEP), (ANSWER_STEP, ANSWER_STEP)])
def test_a_step_as_the_policys_own_is_its_text_and_its_learned_span_leaves_out_the_result(tiny_model, text, own):
    _, tok = tiny_model
    ids, (start, end) = encode_retrieved_block(tok, text, OWN_STEP_TEMPLATE)
    assert ids == encode(tok, text + "\n")  # nothing around the step but the newline a tool result ends with
    assert tok.decode(ids[start:end]).strip() == own and start == 0
    assert tok.decode(ids[end:]).strip() == text[len(own):].strip()


def test_start_retrieves_once_and_beside_tool_step_after_each_tool_step_too(tiny_model):
    store = FixedStore(text=STORED)
    engine, prompts, tok = make_engine(tiny_model, [after_the_stored_step()], store=store,
                                       retrieve_at=("start", "tool_step"), retrieved_step_as_own=True)
    (row,) = engine.run(prompts, query_prefixes=["QUESTION\n"], hybrid=[True])
    assert [e.boundary for e in row.retrievals] == ["start", "tool_step"]
    assert [e.after_step for e in row.retrievals] == [-1, 0]
    assert [s.kind for s in row.segments] == ["retrieved", "policy", "tool", "retrieved", "policy", "end"]
    # the later query reads the inserted step as the row's own text, then the policy's step after it
    tool_query = store.queries[1][0]
    assert tool_query.startswith("QUESTION\n" + STORED) and "out(1)" in tool_query
    drawn = random.Random(0)  # one draw at the start, one after the tool step
    drawn.random(), drawn.random()
    assert engine.rng.random() == drawn.random()


def test_start_alone_draws_nothing_after_tool_steps(tiny_model):
    engine, prompts, _ = make_engine(tiny_model, [[Turn("<python>1</python>"), Turn("<python>2</python>"),
                                                   Turn("<answer>7</answer>")]], store=FixedStore(text=STORED),
                                     retrieve_at=("start",))
    (row,) = engine.run(prompts, hybrid=[True])
    assert [e.boundary for e in row.retrievals] == ["start"]
    drawn = random.Random(0)
    drawn.random()
    assert engine.rng.random() == drawn.random()


def test_a_stored_answer_as_the_policys_own_ends_the_row(tiny_model):
    engine, prompts, tok = start_engine(tiny_model, FixedStore(text=ANSWER_STEP), rows=1, retrieved_step_as_own=True)
    (row,) = engine.run(prompts, hybrid=[True])
    assert row.finished and not row.truncated and [s.kind for s in row.segments] == ["retrieved", "end"]
    assert engine.backend.model.generate.calls == 0  # the policy is not asked to go on after its answer
    assert tok.decode(policy_view(row), skip_special_tokens=True).strip() == ANSWER_STEP


def test_an_answer_tag_in_a_stored_steps_tool_result_does_not_end_the_row(tiny_model):
    printed = "<think>show the tag</think>\n<python>print('</ans' + 'wer>')</python>\n<result>\n</answer>\n</result>"
    engine, prompts, _ = start_engine(tiny_model, FixedStore(text=printed), rows=1, retrieved_step_as_own=True)
    (row,) = engine.run(prompts, hybrid=[True])
    assert [s.kind for s in row.segments] == ["retrieved", "policy", "tool", "policy", "end"]
    assert row.finished and engine.backend.model.generate.calls > 0  # the policy writes its own answer


def test_the_fallback_text_stays_a_block_even_as_the_policys_own(tiny_model):
    engine, prompts, tok = start_engine(tiny_model, FixedStore(text="Reason on your own.", fallback=True), rows=1,
                                        retrieved_step_as_own=True)
    (row,) = engine.run(prompts, hybrid=[True])
    (event,) = row.retrievals
    assert not event.as_own and event.step_tokens is None
    assert row.completion_ids[: event.end] == encode(tok, engine.config.retrieve_template.format(
        text="Reason on your own."))
    assert policy_view(row) == row.completion_ids[event.end :]  # removed before scoring, as any block


@pytest.mark.parametrize("as_own", [False, True])
def test_the_reward_view_keeps_a_step_inserted_as_the_policys_own(tiny_model, as_own):
    engine, prompts, tok = start_engine(tiny_model, FixedStore(text=STORED), rows=1, retrieved_step_as_own=as_own)
    (row,) = engine.run(prompts, hybrid=[True])
    scored = tok.decode(policy_view(row), skip_special_tokens=True)
    assert scored.startswith(STORED) is as_own
    assert (STEP in scored) is as_own and scored.rstrip().endswith("<answer>7</answer>")
    assert policy_view(row, keep_retrieved=True) == row.completion_ids  # score_retrieved_blocks: everything


def sampled(tiny_model_dir, retrieve_at, store, retrieve_prob=1.0):
    """Rows 0 and 2 hybrid, sampled from the tiny model under one torch seed."""
    from transformers import AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    config = RolloutConfig(max_completion_length=96, max_turn_tokens=24, retrieve_prob=retrieve_prob,
                           retrieve_at=retrieve_at, retrieved_step_as_own=True)
    engine = HybridRolloutEngine(tok, TransformersBackend(model, tok), [EchoTool()], store, config, seed=0)
    torch.manual_seed(5)
    return engine.run(prompts_for(tok, 4), hybrid=[True, False, True, False])


def assert_same_rows(rows, reference):
    """The same ids, masks, steps and ends; step entropies to float rounding (a row that retrieved changes the
    batch's padding, so the other rows' logits may differ in their last bits)."""
    for row, other in zip(rows, reference, strict=True):
        assert (row.completion_ids, row.env_mask, row.truncated, row.finished, row.tool_calls) == (
            other.completion_ids, other.env_mask, other.truncated, other.finished, other.tool_calls)
        assert [(s.kind, s.start, s.end) for s in row.segments] == [(s.kind, s.start, s.end) for s in other.segments]
        assert [s.entropy for s in row.segments] == pytest.approx([s.entropy for s in other.segments], rel=1e-6)


@pytest.mark.parametrize("retrieve_at", [("start",), ("start", "tool_step")])
def test_on_policy_rows_are_the_rows_of_a_rollout_without_retrieval(tiny_model_dir, retrieve_at):
    rows = sampled(tiny_model_dir, retrieve_at, FixedStore(text=STORED))
    reference = sampled(tiny_model_dir, retrieve_at, None)
    assert [bool(row.retrievals) for row in rows] == [True, False, True, False]
    assert_same_rows(rows[1::2], reference[1::2])


def test_a_hybrid_row_that_draws_no_retrieval_at_the_start_is_unchanged(tiny_model_dir):
    rows = sampled(tiny_model_dir, ("start",), FixedStore(text=STORED), retrieve_prob=1e-12)
    reference = sampled(tiny_model_dir, ("start",), None)
    assert not any(row.retrievals for row in rows)
    assert_same_rows(rows, reference)


def test_a_step_as_the_policys_own_is_refused_after_its_plan_and_with_json_tools():
    with pytest.raises(ValueError, match="retrieved_step_as_own .* retrieve_at must be among"):
        RolloutConfig(retrieve_at=("plan", "tool_step"), retrieved_step_as_own=True)
    with pytest.raises(ValueError, match="retrieve_at must be among"):
        RolloutConfig(retrieve_at=("start",), tool_protocol="json")
    with pytest.raises(ValueError, match="retrieved_step_as_own .* tool_protocol 'tags'"):
        RolloutConfig(retrieve_at=("tool_step",), retrieved_step_as_own=True, tool_protocol="json")
