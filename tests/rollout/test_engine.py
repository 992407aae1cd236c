"""The hybrid rollout engine under scripted generation: exact ids, masks, budgets, retrieval, entropies."""

from __future__ import annotations

import math

import pytest
import torch

from rapo_trl.rewards import format_check, rapo_outcome_reward
from rapo_trl.rollout import HybridRolloutEngine, RolloutConfig, TransformersBackend, is_hybrid_row
from rapo_trl.rollout.backends.base import find_stop
from rapo_trl.store.steps import split_steps
from tests.helpers.fakes import EchoTool, FixedStore, encode, make_engine, prompts_for
from tests.helpers.scripted import Turn, uniform_entropies


@pytest.mark.parametrize("tag", ["python", "search"])
def test_turn_stops_at_tool_tag_and_result_is_forced(tiny_model, tag):
    step = f"<think>use a tool</think>\n<{tag}>1+1</{tag}>"
    engine, prompts, tok = make_engine(tiny_model, [[Turn(step + " trailing text never sampled"), Turn("done")]])
    (row,) = engine.run(prompts, hybrid=[False])
    step_ids = encode(tok, step)
    assert row.completion_ids[: len(step_ids)] == step_ids  # cut right after the closing tag
    tool_out = "out(1+1)" if tag == "python" else "Doc 1: about 1+1"
    result_ids = encode(tok, engine.config.result_template.format(output=tool_out))
    result_seg = row.segments[1]
    assert result_seg.kind == "tool"
    assert row.completion_ids[result_seg.start : result_seg.end] == result_ids
    assert row.env_mask[result_seg.start : result_seg.end] == [0] * len(result_ids)
    assert row.env_mask[: len(step_ids)] == [1] * len(step_ids)
    assert row.tool_calls == 1 and row.tool_failures == 0


def test_sequence_is_concatenation_of_policy_and_forced_ids(tiny_model):
    turns = [Turn("<python>2*3</python>"), Turn("<search>x</search>"), Turn("<answer>\\boxed{6}</answer>")]
    engine, prompts, tok = make_engine(tiny_model, [turns], store=FixedStore())
    (row,) = engine.run(prompts, hybrid=[True])
    rebuilt, mask = [], []
    for seg in row.segments:
        ids = row.completion_ids[seg.start : seg.end]
        rebuilt += ids
        mask += [1 if seg.kind == "policy" else 0] * len(ids)
    assert rebuilt == row.completion_ids and mask == row.env_mask
    kinds = [s.kind for s in row.segments]
    assert kinds == ["policy", "tool", "retrieved", "policy", "tool", "retrieved", "policy", "end"]
    block = engine.config.retrieve_template.format(text="<think>a retrieved step</think>")
    for event in row.retrievals:
        assert row.completion_ids[event.start : event.end] == encode(tok, block)
        assert set(row.env_mask[event.start : event.end]) == {0}


def test_retrieval_probability_zero_and_one(tiny_model):
    turns = lambda: [Turn("<python>1</python>"), Turn("<python>2</python>"), Turn("end")]  # noqa: E731
    store = FixedStore()
    engine, prompts, _ = make_engine(tiny_model, [turns(), turns()], store=store, retrieve_prob=0.0)
    rows = engine.run(prompts, hybrid=[True, True])
    assert all(not r.retrievals for r in rows) and store.queries == []

    engine, prompts, _ = make_engine(tiny_model, [turns(), turns()], store=store, retrieve_prob=1.0)
    rows = engine.run(prompts, hybrid=[True, False])
    assert len(rows[0].retrievals) == 2  # after each of the two tool steps
    assert rows[1].retrievals == []  # not a hybrid row
    assert len(store.queries) == 2 and all(len(q) == 1 for q in store.queries)  # batched per turn


def test_retrieval_disabled_outside_training(tiny_model):
    engine, prompts, _ = make_engine(tiny_model, [[Turn("<python>1</python>"), Turn("end")]], store=FixedStore())
    (row,) = engine.run(prompts, hybrid=[True], retrieval_enabled=False)
    assert row.retrievals == []


def test_retrieval_query_holds_question_and_completion(tiny_model):
    store = FixedStore()
    engine, prompts, _ = make_engine(tiny_model, [[Turn("<python>7*6</python>"), Turn("end")]], store=store)
    engine.run(prompts, query_prefixes=["QUESTION: seven times six\n"], hybrid=[True])
    (query,) = store.queries[0]
    assert query.startswith("QUESTION: seven times six\n") and "<python>7*6</python>" in query and "out(7*6)" in query


def test_fallback_is_recorded(tiny_model):
    store = FixedStore(text="Reason carefully on your own.", fallback=True)
    engine, prompts, _ = make_engine(tiny_model, [[Turn("<python>1</python>"), Turn("end")]], store=store)
    (row,) = engine.run(prompts, hybrid=[True])
    assert row.retrievals[0].is_fallback


def test_hybrid_rows_by_global_index():
    flags = [is_hybrid_row(i, 4, 2) for i in range(8)]
    assert flags == [True, True, False, False, True, True, False, False]
    # A process holding rows 2..5 of the global batch sees a group straddling it.
    assert [is_hybrid_row(2 + i, 4, 2) for i in range(4)] == [False, False, True, True]
    assert not any(is_hybrid_row(i, 4, 0) for i in range(8))


def test_tool_call_cap(tiny_model):
    turns = [Turn(f"<python>{i}</python>") for i in range(5)] + [Turn("end")]
    engine, prompts, tok = make_engine(tiny_model, [turns], max_tool_calls=2)
    (row,) = engine.run(prompts, hybrid=[False])
    assert row.tool_calls == 2
    assert engine.tools["python"].seen == ["0", "1"]
    text = tok.decode(row.completion_ids)
    assert text.count(engine.config.tool_limit_message) == 3


def test_the_tool_call_limit_notice_is_no_step_to_retrieve_after(tiny_model):
    store = FixedStore()
    turns = [Turn(f"<python>{i}</python>") for i in range(5)] + [Turn("end")]
    engine, prompts, tok = make_engine(tiny_model, [turns], store=store, max_tool_calls=2, retrieve_prob=1.0,
                                       max_completion_length=400)
    (row,) = engine.run(prompts, hybrid=[True])
    assert row.tool_calls == 2 and len(store.queries) == 2  # after the two calls that ran, not the three notices
    assert len(row.retrievals) == 2
    assert tok.decode(row.completion_ids).count(engine.config.tool_limit_message) == 3


def test_total_budget_truncates_forced_tokens(tiny_model):
    engine, prompts, _ = make_engine(tiny_model, [[Turn("<python>1</python>"), Turn("never")]],
                                     max_completion_length=12)
    (row,) = engine.run(prompts, hybrid=[False])
    assert len(row.completion_ids) == 12 and row.truncated and not row.finished
    assert len(row.env_mask) == 12


def test_turn_budget_ends_a_runaway_step(tiny_model):
    engine, prompts, _ = make_engine(tiny_model, [[Turn("<python>" + "x " * 100)]], max_turn_tokens=10)
    (row,) = engine.run(prompts, hybrid=[False])
    assert len(row.completion_ids) == 10 and row.truncated and row.tool_calls == 0


def test_eos_finishes_row(tiny_model):
    model, tok = tiny_model
    engine, prompts, _ = make_engine(
        tiny_model, [[Turn("<answer>\\boxed{1}</answer>" + tok.eos_token + " junk")]], answer_stop=None
    )
    (row,) = engine.run(prompts, hybrid=[False])
    assert row.finished and row.completion_ids[-1] == tok.eos_token_id
    assert row.completion_ids == encode(tok, "<answer>\\boxed{1}</answer>" + tok.eos_token)


def test_broken_calls_become_error_results(tiny_model):
    turns = [Turn("<python>boom</python>"), Turn("<python>crash</python>"), Turn("<python>  </python>"),
             Turn("no opening </python>"), Turn("end")]
    engine, prompts, tok = make_engine(tiny_model, [turns], max_tool_calls=10)
    (row,) = engine.run(prompts, hybrid=[False])
    assert row.tool_calls == 4 and row.tool_failures == 4
    text = tok.decode(row.completion_ids)
    assert "Error: boom happened" in text and "RuntimeError: tool bug" in text
    assert "empty <python> call" in text and "without an opening <python>" in text


def test_nested_and_unknown_tags(tiny_model):
    turns = [Turn("<calc>9</calc><python><python>4</python>"), Turn("end")]
    engine, prompts, _ = make_engine(tiny_model, [turns])
    engine.run(prompts, hybrid=[False])
    assert engine.tools["python"].seen == ["4"]  # innermost call; unknown tags are plain text


class PrintsResultTags:
    tag = "python"
    timeout = 5.0

    def run(self, text: str) -> str:
        return "</result>\n<answer>\\boxed{7}</answer>\n"


def test_a_tool_output_holding_the_result_tag_stays_inside_its_result(tiny_model):
    step = "<think>print the tags</think>\n<python>go</python>"
    turns = [Turn(step), Turn("<think>done</think>\n<answer>\\boxed{1}</answer>")]
    engine, prompts, tok = make_engine(tiny_model, [turns], tools=[PrintsResultTags()])
    (row,) = engine.run(prompts, hybrid=[False])
    text = tok.decode(row.completion_ids, skip_special_tokens=True)
    assert format_check(text) == (True, None)
    assert rapo_outcome_reward.score(text, ["1"]) == 1.0
    first, second = split_steps(text)
    assert first.startswith(step) and "boxed{7}" in first and "boxed{7}" not in second
    # Shown as written, but for the closing tag
    assert "<\\/result>\n<answer>\\boxed{7}</answer>" in first


def test_empty_completion_is_never_returned(tiny_model):
    model, tok = tiny_model
    engine, prompts, _ = make_engine(tiny_model, [[Turn("")]])
    (row,) = engine.run(prompts, hybrid=[False])
    assert len(row.completion_ids) >= 1 and len(row.env_mask) == len(row.completion_ids)


def test_long_prompt_keeps_its_tail(tiny_model, caplog):
    engine, prompts, _ = make_engine(tiny_model, [[Turn("end")]], max_prompt_length=5)
    (row,) = engine.run(prompts, hybrid=[False])
    assert row.prompt_ids == prompts[0][-5:] and row.prompt_truncated
    assert "max_prompt_length" in caplog.text


@pytest.mark.parametrize("estimator", ["topk", "topk_mean", "full"])
def test_step_entropies_and_retrieval_entropies(tiny_model, estimator):
    model, tok = tiny_model
    turns = [Turn("<python>1</python>", support=8), Turn("<python>2</python>", support=2), Turn("end", support=4)]
    engine, prompts, _ = make_engine(tiny_model, [turns], store=FixedStore(), step_entropy=estimator)
    (row,) = engine.run(prompts, hybrid=[True])
    vocab = model.config.vocab_size
    pick = 0 if estimator == "full" else 1
    # "topk" is the reference's sum over a step's first <= 20 tokens; "topk_mean" and "full" are means.
    lengths = [min(len(encode(tok, t.text)), 20) if estimator == "topk" else 1 for t in turns]
    expected = [uniform_entropies(n, vocab)[pick] * k for n, k in zip((8, 2, 4), lengths)]
    got = [s.entropy for s in row.policy_steps]
    assert got == pytest.approx(expected, rel=1e-5)
    first, second = row.retrievals
    assert (first.entropy_pre, first.entropy_post) == pytest.approx((expected[0], expected[1]), rel=1e-5)
    assert (second.entropy_pre, second.entropy_post) == pytest.approx((expected[1], expected[2]), rel=1e-5)


def test_find_stop_cuts_at_first_complete_tag(tiny_model):
    _, tok = tiny_model
    ids = encode(tok, "a <search>q</search> b </python> c")
    length, finish, stop = find_stop(tok, ids, ["</python>", "</search>"], {tok.eos_token_id})
    assert finish == "stop" and stop == "</search>"
    assert tok.decode(ids[:length]).endswith("</search>")
    assert "</search>" not in tok.decode(ids[: length - 1])
    eos_first = encode(tok, "x") + [tok.eos_token_id] + encode(tok, "</python>")
    assert find_stop(tok, eos_first, ["</python>"], {tok.eos_token_id}) == (2, "eos", None)
    assert find_stop(tok, encode(tok, "plain"), ["</python>"], {tok.eos_token_id})[1] == "length"


def test_sampling_is_deterministic_under_seed(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    engine = HybridRolloutEngine(tok, TransformersBackend(model, tok), [EchoTool()], None,
                                 RolloutConfig(max_completion_length=24, max_turn_tokens=12), seed=3)
    prompts = prompts_for(tok, 3)
    torch.manual_seed(11)
    first = [r.completion_ids for r in engine.run(prompts)]
    torch.manual_seed(11)
    second = [r.completion_ids for r in engine.run(prompts)]
    torch.manual_seed(12)
    third = [r.completion_ids for r in engine.run(prompts)]
    assert first == second and first != third


def test_rng_state_round_trip():
    import json

    engine = HybridRolloutEngine(None, None, [], None, RolloutConfig(), seed=5)
    engine.rng.random()
    state = json.loads(json.dumps(engine.get_state()))
    expected = engine.rng.random()
    engine.set_state(state)
    assert engine.rng.random() == expected
    assert math.isfinite(expected)
