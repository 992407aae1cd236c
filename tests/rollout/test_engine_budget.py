"""Rollouts keep their signal: retrieved steps that do not fit are skipped, rows stop at </answer>."""

from __future__ import annotations

from tests.helpers.fakes import FixedStore, encode, make_engine
from tests.helpers.scripted import Turn

STEP = "<python>2*3</python>"
ANSWER = "<answer>\\boxed{6}</answer>"
LONG_STEP = "<think>" + "a long retrieved step " * 30 + "</think>"


def _budget_after_tool(tok, engine, prompts, spare):
    """A completion budget that leaves ``spare`` tokens after the first step and its tool result."""
    used = len(encode(tok, STEP)) + len(encode(tok, engine.config.result_template.format(output="out(2*3)")))
    return used + spare


def test_retrieved_step_that_does_not_fit_is_skipped_not_cut(tiny_model):
    store = FixedStore(text=LONG_STEP)
    engine, prompts, tok = make_engine(tiny_model, [[Turn(STEP), Turn(ANSWER)]], store=store)
    block = encode(tok, engine.config.retrieve_template.format(text=LONG_STEP))
    answer = encode(tok, ANSWER)
    spare = len(answer) + 5
    assert spare < len(block)  # the block would not fit, the answer does
    engine.config.max_completion_length = _budget_after_tool(tok, engine, prompts, spare)
    (row,) = engine.run(prompts, hybrid=[True])
    assert [s.kind for s in row.segments] == ["policy", "tool", "policy", "end"]
    assert row.retrievals == [] and row.skipped_retrievals == 1
    assert not row.truncated and row.finished
    assert row.completion_ids[-len(answer) - 1:] == answer + [tok.eos_token_id]


def test_retrieved_step_that_fits_is_inserted_whole(tiny_model):
    store = FixedStore(text=LONG_STEP)
    engine, prompts, tok = make_engine(tiny_model, [[Turn(STEP), Turn(ANSWER)]], store=store,
                                       max_completion_length=1024)
    (row,) = engine.run(prompts, hybrid=[True])
    block = encode(tok, engine.config.retrieve_template.format(text=LONG_STEP))
    (event,) = row.retrievals
    assert row.completion_ids[event.start:event.end] == block
    assert row.skipped_retrievals == 0 and row.finished


def test_retrieved_token_cap_skips_long_blocks(tiny_model):
    store = FixedStore(text=LONG_STEP)
    engine, prompts, tok = make_engine(tiny_model, [[Turn(STEP), Turn(ANSWER)]], store=store,
                                       max_completion_length=1024, max_retrieved_tokens=16)
    (row,) = engine.run(prompts, hybrid=[True])
    assert row.retrievals == [] and row.skipped_retrievals == 1
    assert "retrieved" not in [s.kind for s in row.segments]


def test_row_stops_when_its_answer_closes(tiny_model):
    engine, prompts, tok = make_engine(tiny_model, [[Turn(ANSWER + " and then some rambling")]])
    (row,) = engine.run(prompts, hybrid=[False])
    answer = encode(tok, ANSWER)
    # the environment closes the episode with a forced EOS (mask 0), so TRL sees a terminated row, not a clipped one
    assert row.completion_ids == answer + [tok.eos_token_id]
    assert row.env_mask == [1] * len(answer) + [0]
    assert [s.kind for s in row.segments] == ["policy", "end"]
    assert row.finished and not row.truncated


def test_answer_in_the_last_slot_finishes_without_eos(tiny_model):
    engine, prompts, tok = make_engine(tiny_model, [[Turn(ANSWER)]])
    engine.config.max_completion_length = len(encode(tok, ANSWER))
    (row,) = engine.run(prompts, hybrid=[False])
    assert row.completion_ids == encode(tok, ANSWER) and row.finished


def test_answer_stop_can_be_turned_off(tiny_model):
    text = ANSWER + " and then some rambling"
    engine, prompts, tok = make_engine(tiny_model, [[Turn(text)]], answer_stop=None)
    (row,) = engine.run(prompts, hybrid=[False])
    assert tok.decode(row.completion_ids).startswith(text)
    assert "</answer>" not in engine.stop_strings
