"""The JSON tool protocol in the rollout engine: multi-step environments with state, failing tools, calls that do not
parse, retrieved steps after a tool step, and the chat-template round trip of the token ids."""

from __future__ import annotations

import pytest

from rapo_trl.rollout import HybridRolloutEngine, RolloutConfig, TransformersBackend
from rapo_trl.rollout.chat_tools import environment_tools
from tests.helpers.environments import Counter, call, multiply
from tests.helpers.fakes import FixedStore
from tests.helpers.scripted import ScriptedGenerate, Turn


def _engine(tiny_model, turns_by_row, tools, store=None, **config):
    model, tokenizer = tiny_model
    messages = [[{"role": "user", "content": f"Count for me {i}"}] for i in range(len(turns_by_row))]
    prompts = [tokenizer.apply_chat_template(m, tools=list(tools), add_generation_prompt=True, tokenize=True,
                                             return_dict=False) for m in messages]
    model.generate = ScriptedGenerate(tokenizer, [(p, [Turn(t) for t in turns]) for p, turns in
                                                  zip(prompts, turns_by_row)], model.config.vocab_size)
    settings = dict(max_completion_length=400, max_turn_tokens=120, tool_protocol="json", retrieve_prob=1.0)
    settings.update(config)
    engine = HybridRolloutEngine(tokenizer, TransformersBackend(model, tokenizer), (), store,
                                 RolloutConfig(**settings), seed=0)
    return engine, messages, prompts, tokenizer


def _round_trip(tokenizer, messages, tools, row):
    """The conversation rendered by the template, as ids, against the row's ids (the template's newline after the
    last end-of-turn is not part of a completion)."""
    rendered = tokenizer.apply_chat_template(messages + row.messages, tools=list(tools), tokenize=True,
                                             return_dict=False)
    ids = row.prompt_ids + row.completion_ids
    assert rendered[: len(ids)] == ids
    assert tokenizer.decode(rendered[len(ids):]).strip() == ""


def test_environment_keeps_state_across_calls_and_results_are_forced_template_tokens(tiny_model):
    env = Counter()
    tools = environment_tools(env)
    turns = [call("add", "Adding two.", n=2), call("add", n=3), "The total is 5.<|im_end|>"]
    engine, messages, prompts, tok = _engine(tiny_model, [turns], tools.values())
    (row,) = engine.run(prompts, row_tools=[tools], retrieval_enabled=False)

    assert env.total == 5 and row.finished and not row.truncated
    assert row.tool_calls == 2 and row.tool_failures == 0
    roles = [m["role"] for m in row.messages]
    assert roles == ["assistant", "tool", "assistant", "tool", "assistant"]
    assert [m["content"] for m in row.messages if m["role"] == "tool"] == ["2", "5"]
    assert row.messages[0]["tool_calls"][0]["function"] == {"name": "add", "arguments": {"n": 2}}
    # Forced tokens are exactly the template's rendering of the tool messages, mask 0; the policy's own, mask 1.
    for segment in row.segments:
        assert set(row.env_mask[segment.start:segment.end]) == {0 if segment.kind == "tool" else 1}
    tool_text = tok.decode(row.completion_ids[row.segments[1].start:row.segments[1].end])
    assert tool_text == "\n<|im_start|>user\n<tool_response>\n2\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    _round_trip(tok, messages[0], tools.values(), row)


def test_a_tool_that_raises_shows_the_error_and_the_rollout_goes_on(tiny_model):
    env = Counter()
    tools = environment_tools(env)
    turns = [call("explode"), call("add", n=4), "Done.<|im_end|>"]
    engine, messages, prompts, tok = _engine(tiny_model, [turns], tools.values())
    (row,) = engine.run(prompts, row_tools=[tools], retrieval_enabled=False)

    assert row.tool_calls == 2 and row.tool_failures == 1 and env.total == 4 and row.finished
    assert row.messages[1]["content"] == str({"error": "the counter exploded"})  # as TRL shows a failed call
    assert row.tool_errors == [("explode", "RuntimeError: the counter exploded")]
    _round_trip(tok, messages[0], tools.values(), row)


def test_a_tool_that_hangs_fails_its_call_at_the_timeout_and_the_rollout_goes_on(tiny_model):
    import threading
    import time

    release = threading.Event()

    def wait_forever(seconds: float) -> str:
        """Wait.

        Args:
            seconds: how long
        """
        release.wait()
        return "woke"

    turns = [call("wait_forever", seconds=1e9), call("multiply", a=6, b=7), "42<|im_end|>"]
    engine, messages, prompts, tok = _engine(tiny_model, [turns], [wait_forever, multiply])
    engine.chat_tools.timeout = 0.3  # the tag protocol's 30 s, shortened for the test
    started = time.perf_counter()
    try:
        (row,) = engine.run(prompts, row_tools=[{"wait_forever": wait_forever, "multiply": multiply}],
                            retrieval_enabled=False)
    finally:
        release.set()  # the hung call's thread ends with the test
    assert time.perf_counter() - started < 30
    assert row.finished and row.tool_calls == 2 and row.tool_failures == 1
    assert row.messages[1]["content"] == str({"error": "wait_forever timed out after 0.3 s"})
    assert row.tool_errors == [("wait_forever", "ToolError: wait_forever timed out after 0.3 s")]
    assert row.messages[3]["content"] == "42"


def test_without_a_timeout_calls_run_on_the_calling_thread_in_row_order(tiny_model):
    import asyncio
    import threading

    seen = []

    def where(tag: str) -> str:
        """Say where the call ran.

        Args:
            tag: a name for the call
        """
        seen.append((tag, threading.get_ident()))
        return tag

    async def later(tag: str) -> str:
        """Say it after a pause.

        Args:
            tag: a name for the call
        """
        await asyncio.sleep(0)
        return tag.upper()

    rows = [[call("where", tag=f"r{i}a"), call("later", tag=f"r{i}b"), call("where", tag=f"r{i}c"), "ok<|im_end|>"]
            for i in range(3)]
    engine, _, prompts, _ = _engine(tiny_model, rows, [where, later], json_tool_timeout=None, tool_workers=4)

    async def in_a_running_loop():  # a notebook's cell runs inside the kernel's event loop
        return engine.run(prompts, row_tools=[{"where": where, "later": later}] * 3, retrieval_enabled=False)

    results = asyncio.run(in_a_running_loop())
    assert {ident for _, ident in seen} == {threading.get_ident()}
    assert [tag for tag, _ in seen] == ["r0a", "r1a", "r2a", "r0c", "r1c", "r2c"]  # a turn's calls, row by row
    for i, row in enumerate(results):
        assert [m["content"] for m in row.messages if m["role"] == "tool"] == [f"r{i}a", f"R{i}B", f"r{i}c"]
        assert row.tool_failures == 0


def test_without_a_timeout_a_raising_tool_is_still_a_failed_call(tiny_model):
    env = Counter()
    tools = environment_tools(env)
    turns = [call("explode"), call("add", n=4), "Done.<|im_end|>"]
    engine, _, prompts, _ = _engine(tiny_model, [turns], tools.values(), json_tool_timeout=None)
    (row,) = engine.run(prompts, row_tools=[tools], retrieval_enabled=False)
    assert row.messages[1]["content"] == str({"error": "the counter exploded"})
    assert row.tool_errors == [("explode", "RuntimeError: the counter exploded")] and env.total == 4


def test_unknown_tool_and_bad_arguments_are_failed_calls(tiny_model):
    turns = [call("divide", a=1), call("multiply", a=2, c=3), call("multiply", a=6, b=7), "42<|im_end|>"]
    engine, _, prompts, _ = _engine(tiny_model, [turns], [multiply], max_tool_calls=5)
    engine.json_tools = {"multiply": multiply}
    (row,) = engine.run(prompts, retrieval_enabled=False)
    tool_contents = [m["content"] for m in row.messages if m["role"] == "tool"]
    assert tool_contents[0] == str({"error": "Tool divide not found."})
    assert "unexpected keyword argument 'c'" in tool_contents[1]
    assert tool_contents[2] == "42" and row.tool_failures == 2 and row.tool_calls == 3


def test_a_call_that_does_not_parse_ends_the_rollout_as_plain_text(tiny_model):
    env = Counter()
    tools = environment_tools(env)
    broken = 'Let me add. <tool_call>\n{"name": "add", "arguments": {"n": 2</tool_call><|im_end|>'
    engine, _, prompts, _ = _engine(tiny_model, [[broken, call("add", n=1)]], tools.values())
    (row,) = engine.run(prompts, row_tools=[tools], retrieval_enabled=False)
    assert row.finished and row.tool_calls == 0 and env.total == 0
    assert row.messages == [{"role": "assistant", "content": 'Let me add. <tool_call>\n{"name": "add", "arguments": '
                                                             '{"n": 2</tool_call>'}]
    assert set(row.env_mask) == {1}


def test_calls_past_the_budget_get_the_limit_notice(tiny_model):
    env = Counter()
    tools = environment_tools(env)
    turns = [call("add", n=1), call("add", n=1), "ok<|im_end|>"]
    engine, messages, prompts, tok = _engine(tiny_model, [turns], tools.values(), max_tool_calls=1)
    (row,) = engine.run(prompts, row_tools=[tools], retrieval_enabled=False)
    assert env.total == 1 and row.tool_calls == 1
    assert row.messages[3]["content"] == engine.config.tool_limit_message


def test_a_turn_whose_calls_are_all_past_the_budget_retrieves_nothing(tiny_model):
    env = Counter()
    tools = environment_tools(env)
    store = FixedStore()
    turns = [call("add", n=1), call("add", n=1), call("add", n=1), "ok<|im_end|>"]
    engine, messages, prompts, tok = _engine(tiny_model, [turns], tools.values(), store=store, max_tool_calls=1)
    (row,) = engine.run(prompts, row_tools=[tools], hybrid=[True])
    assert env.total == 1 and row.tool_calls == 1
    assert len(store.queries) == 1 and len(row.retrievals) == 1  # after the call that ran only


def test_a_result_that_does_not_fit_ends_the_row_with_its_call(tiny_model):
    env = Counter()
    tools = environment_tools(env)
    _, tok = tiny_model
    turn = len(tok(call("add", n=1), add_special_tokens=False)["input_ids"])
    engine, _, prompts, tok = _engine(tiny_model, [[call("add", n=1), "never<|im_end|>"]], tools.values(),
                                      max_completion_length=turn + 5, max_turn_tokens=turn + 5)
    (row,) = engine.run(prompts, row_tools=[tools], retrieval_enabled=False)
    assert row.finished and not row.truncated and row.completion_ids[-1] == tok.eos_token_id
    assert [s.kind for s in row.segments] == ["policy"]


def test_retrieved_step_opens_the_next_assistant_turn_and_is_never_parsed(tiny_model):
    env = Counter()
    tools = environment_tools(env)
    stored = call("add", "A stored step.", n=100).replace("<|im_end|>", "") + "\n<result>\n100\n</result>"
    turns = [call("add", n=2), "Total 2.<|im_end|>"]
    engine, messages, prompts, tok = _engine(tiny_model, [turns], tools.values(),
                                             store=FixedStore(text=stored + "<|im_end|>"))
    (row,) = engine.run(prompts, hybrid=[True], row_tools=[tools])

    assert [s.kind for s in row.segments] == ["policy", "tool", "retrieved", "policy"]
    assert env.total == 2 and row.tool_calls == 1 and row.finished  # the stored call is not run
    retrieved = row.completion_ids[row.segments[2].start:row.segments[2].end]
    assert tok.eos_token_id not in retrieved  # its end-of-turn text stays text
    assert set(row.env_mask[row.segments[2].start:row.segments[2].end]) == {0}
    assert [m["role"] for m in row.messages] == ["assistant", "tool", "assistant"]
    assert row.messages[-1] == {"role": "assistant", "content": "Total 2."}
    (event,) = row.retrievals
    assert tok.decode(row.completion_ids[slice(*event.step_tokens)]).startswith("A stored step.")


def test_first_tool_step_retrieves_once_with_json_tools(tiny_model):
    env = Counter()
    tools = environment_tools(env)
    store = FixedStore()
    turns = [call("add", n=1), call("add", n=2), "ok<|im_end|>"]
    engine, _, prompts, _ = _engine(tiny_model, [turns], tools.values(), store=store,
                                    retrieve_at=("first_tool_step",))
    (row,) = engine.run(prompts, hybrid=[True], row_tools=[tools])
    assert env.total == 3 and row.tool_calls == 2 and row.finished
    assert [s.kind for s in row.segments] == ["policy", "tool", "retrieved", "policy", "tool", "policy"]
    assert len(store.queries) == 1 and [e.after_step for e in row.retrievals] == [0]


def test_json_protocol_refuses_tag_tools_and_plan_retrieval(tiny_model):
    from tests.helpers.fakes import EchoTool

    model, tok = tiny_model
    with pytest.raises(TypeError, match="not a JSON tool"):
        HybridRolloutEngine(tok, None, [EchoTool()], None, RolloutConfig(tool_protocol="json"))
    with pytest.raises(ValueError, match="retrieve_at must be"):
        RolloutConfig(tool_protocol="json", retrieve_at=("plan", "tool_step"))
