"""Faults during a rollout end that retrieval or that tool call, never the training step."""

from __future__ import annotations

import pytest

from rapo_trl.rollout import RolloutConfig
from rapo_trl.store import retry
from tests.helpers.fakes import EchoTool, FixedStore, Found, make_engine
from tests.helpers.scripted import Turn


class FlakyStore(FixedStore):
    """Raises ``error`` on its first ``failures`` selects, then answers."""

    def __init__(self, error: BaseException, failures: int, **kwargs):
        super().__init__(**kwargs)
        self.error, self.failures, self.calls = error, failures, 0

    def select(self, contexts):
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return super().select(contexts)


@pytest.fixture
def waits(monkeypatch):
    """The backoff waits, recorded instead of slept."""
    slept = []
    monkeypatch.setattr(retry.time, "sleep", slept.append)
    return slept


def _turns():
    return [Turn("<python>1</python>"), Turn("<python>2</python>"), Turn("<answer>\\boxed{2}</answer>")]


def test_a_store_that_keeps_failing_costs_only_its_retrievals(tiny_model, waits):
    store = FlakyStore(ConnectionError("Chroma server went away"), failures=10**6)
    engine, prompts, _ = make_engine(tiny_model, [_turns(), _turns()], store=store)
    rows = engine.run(prompts, hybrid=[True, True])
    assert all(row.finished and not row.retrievals for row in rows)  # the rollout went on to its answer
    assert all(row.tool_calls == 2 for row in rows)
    assert engine.store_errors == 2 * 2  # each row's retrieval at each of its two tool steps
    # Three tries, backing off, then an outage: one try (no waits) for each later retrieval.
    assert store.calls == 3 + 1 and waits == [0.5, 1.0] and engine.store_outage.down


def test_a_transient_store_error_is_retried(tiny_model, waits):
    store = FlakyStore(TimeoutError("read timed out"), failures=1)
    engine, prompts, _ = make_engine(tiny_model, [_turns()], store=store)
    (row,) = engine.run(prompts, hybrid=[True])
    assert len(row.retrievals) == 2 and getattr(engine, "store_errors", 0) == 0 and waits == [0.5]


def test_bad_input_is_not_retried(tiny_model, waits):
    store = FlakyStore(ValueError("bad query"), failures=1)
    engine, prompts, _ = make_engine(tiny_model, [_turns()], store=store)
    (row,) = engine.run(prompts, hybrid=[True])
    assert engine.store_errors == 1 and len(row.retrievals) == 1 and waits == []


def test_a_programming_error_in_the_store_stops_the_run_not_retrieval(tiny_model, waits):
    store = FlakyStore(AttributeError("'str' object has no attribute 'select'"), failures=1)
    engine, prompts, _ = make_engine(tiny_model, [_turns()], store=store)
    with pytest.raises(AttributeError, match="no attribute 'select'"):
        engine.run(prompts, hybrid=[True])
    assert not engine.store_outage.down and engine.store_errors == 0 and waits == []


def test_keyboard_interrupt_in_the_store_stops_the_run(tiny_model, waits):
    engine, prompts, _ = make_engine(tiny_model, [_turns()], store=FlakyStore(KeyboardInterrupt(), failures=1))
    with pytest.raises(KeyboardInterrupt):
        engine.run(prompts, hybrid=[True])



class HitsOnlyStore(FixedStore):
    """Leaves out the contexts it found nothing for (here: the first row's question)."""

    def select(self, contexts):
        self.queries.append(list(contexts))
        return [Found(f"<think>a step for {context}</think>") for context in contexts if "Q0" not in context]


def test_a_store_that_answers_fewer_contexts_than_asked_stops_the_run(tiny_model, waits):
    # Paired in order, the second row's step would be spliced into the first row and the second would get none.
    engine, prompts, _ = make_engine(tiny_model, [_turns(), _turns()], store=HitsOnlyStore())
    with pytest.raises(ValueError, match="1 results for 2 contexts"):
        engine.run(prompts, query_prefixes=["Q0\n", "Q1\n"], hybrid=[True, True])


class SurrogateTool(EchoTool):
    def run(self, text: str) -> str:
        return "bytes: " + b"caf\xe9".decode("utf-8", "surrogateescape")  # a lone surrogate


def test_lone_surrogates_in_tool_and_store_text_are_replaced(tiny_model):
    store = FixedStore(text="step \udcff text")
    engine, prompts, tok = make_engine(tiny_model, [_turns()], store=store, tools=[SurrogateTool()])
    (row,) = engine.run(prompts, hybrid=[True])
    text = tok.decode(row.completion_ids)
    assert "bytes: caf?" in text and "step ? text" in text and row.finished


class ExitingTool(EchoTool):
    def run(self, text: str) -> str:
        raise SystemExit(3)


def test_system_exit_from_a_tool_is_a_tool_failure(tiny_model):
    engine, prompts, tok = make_engine(tiny_model, [_turns()], tools=[ExitingTool()])
    (row,) = engine.run(prompts, hybrid=[False])
    assert row.finished and row.tool_calls == 2 and row.tool_failures == 2
    assert "Error: SystemExit: 3" in tok.decode(row.completion_ids)


class InterruptedTool(EchoTool):
    def run(self, text: str) -> str:
        self.seen.append(text)
        raise KeyboardInterrupt


@pytest.mark.parametrize("tool_workers", [1, 4])
def test_keyboard_interrupt_from_a_tool_stops_the_rollout(tiny_model, tool_workers):
    """Unlike SystemExit, the user's Ctrl-C is no tool failure: it leaves engine.run (from a worker thread too)."""
    tool = InterruptedTool()
    engine, prompts, _ = make_engine(tiny_model, [_turns()], tools=[tool], tool_workers=tool_workers)
    with pytest.raises(KeyboardInterrupt):
        engine.run(prompts, hybrid=[False])
    assert len(tool.seen) == 1  # the first call ended the rollout; no second call was made


@pytest.mark.parametrize(
    ("field", "value", "match"), [("max_tool_calls", -1, "max_tool_calls"), ("max_result_chars", 0, "max_result_chars")]
)
def test_config_rejects_impossible_budgets(field, value, match):
    with pytest.raises(ValueError, match=match):
        RolloutConfig(**{field: value})
    RolloutConfig(max_tool_calls=0)  # no tool calls at all is allowed


def test_a_failed_calls_error_is_named_by_its_last_line():
    from rapo_trl.rollout.tool_turns import error_line

    traceback = "Error: Traceback (most recent call last):\n  File \"<tool>\", line 1\nNameError: name 'x' is not defined\n"
    assert error_line(traceback) == "NameError: name 'x' is not defined"
    assert error_line("Error: empty <python> call.") == "Error: empty <python> call."
    assert error_line("  \n") == ""
