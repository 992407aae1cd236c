"""Retrieval against a store that fails: a real Chroma server killed mid-run, and unencodable text."""

from __future__ import annotations

import pytest

from rapo_trl.store import StoreConfig, TraceStore, retry
from rapo_trl.store.retry import clean_text, select_with_retry


def test_clean_text_replaces_only_lone_surrogates():
    assert clean_text("plain, accents é and emoji 🙂") == "plain, accents é and emoji 🙂"
    assert clean_text("caf\udce9 \ud800") == "caf? ?"


class FlakyStore:
    """``select`` raises the given errors in turn, then returns what it was asked for."""

    def __init__(self, *errors: BaseException):
        self.errors = list(errors)
        self.calls: list[list[str]] = []

    def select(self, contexts):
        self.calls.append(list(contexts))
        if self.errors:
            raise self.errors.pop(0)
        return [f"found: {context}" for context in contexts]


@pytest.fixture
def slept(monkeypatch):
    waits: list[float] = []
    monkeypatch.setattr(retry.time, "sleep", waits.append)
    return waits


def test_transient_errors_are_retried_with_doubling_backoff(slept):
    store = FlakyStore(ConnectionError("reset"), TimeoutError("slow"))
    assert select_with_retry(store, ["q caf\udce9"], attempts=3, backoff_s=0.5) == ["found: q caf?"]
    assert store.calls == [["q caf?"]] * 3  # cleaned once, asked three times
    assert slept == [0.5, 1.0]


def test_a_store_that_keeps_failing_costs_the_retrieval_with_one_warning(slept, caplog):
    store = FlakyStore(*[RuntimeError(f"down {i}") for i in range(4)])
    with caplog.at_level("WARNING", logger=retry.__name__):
        assert select_with_retry(store, ["q"], attempts=4, backoff_s=0.25) is None
    assert len(store.calls) == 4 and slept == [0.25, 0.5, 1.0]
    assert [r.getMessage() for r in caplog.records] == [
        "Trace store select failed 4 times (last: RuntimeError: down 3); going on without retrieval."
    ]


def test_bad_input_is_given_up_on_at_once(slept, caplog):
    store = FlakyStore(ValueError("bad query"))
    with caplog.at_level("WARNING", logger=retry.__name__):
        assert select_with_retry(store, ["q"]) is None
    assert len(store.calls) == 1 and slept == []
    assert [r.getMessage() for r in caplog.records] == [
        "Trace store select failed (ValueError: bad query); going on without retrieval."
    ]


@pytest.mark.parametrize("error", [TypeError("select() got an unexpected keyword"), AttributeError("no select"),
                                   NameError("name 'x' is not defined")])
def test_programming_errors_are_raised_not_given_up_on(slept, error):
    store = FlakyStore(error)
    with pytest.raises(type(error)):
        select_with_retry(store, ["q"])
    assert len(store.calls) == 1 and slept == []


def test_bad_input_after_a_transient_error_stops_the_retries(slept):
    store = FlakyStore(ConnectionError("reset"), ValueError("bad query"), ConnectionError("never reached"))
    assert select_with_retry(store, ["q"], attempts=5, backoff_s=0.1) is None
    assert len(store.calls) == 2 and slept == [0.1]


@pytest.mark.parametrize("error", [KeyboardInterrupt(), SystemExit(3)])
def test_interrupts_and_exits_get_through_unretried(slept, error):
    store = FlakyStore(error)
    with pytest.raises(type(error)):
        select_with_retry(store, ["q"])
    assert len(store.calls) == 1 and slept == []


def test_no_attempts_allowed_means_no_retrieval(slept):
    store = FlakyStore()
    assert select_with_retry(store, ["q"], attempts=0) is None
    assert store.calls == [] and slept == []


@pytest.mark.server
def test_a_killed_server_costs_the_retrieval_not_the_caller(chroma_server, embedder, trajectory, monkeypatch):
    store = TraceStore.connect("127.0.0.1", chroma_server.port, embedder=embedder,
                               config=StoreConfig(show_progress=False))
    store.add_trajectories([trajectory("1")], [1.0], ["q1"], prompts=["What is 12*7?"])
    (found,) = select_with_retry(store, ["What is 12*7? caf\udce9"])  # a lone surrogate in the query
    assert not found.is_fallback
    chroma_server.kill()
    slept = []
    monkeypatch.setattr(retry.time, "sleep", slept.append)  # the backoff waits, recorded instead of slept
    assert select_with_retry(store, ["What is 12*7?"], attempts=3, backoff_s=0.25) is None
    assert slept == [0.25, 0.5]
