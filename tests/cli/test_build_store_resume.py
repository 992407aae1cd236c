"""A killed ``rapo build-store`` resumes to exactly the store an uninterrupted build makes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rapo_trl.cli import build_store
from rapo_trl.cli.arguments import RAPOScriptArguments
from rapo_trl.store import TraceStore

SAMPLES = 2
"""Trajectories per question: the expert's best of two is kept."""
ARGS = SimpleNamespace(max_completion_length=64, max_turn_tokens=32, temperature=1.0, use_cpu=True, seed=0,
                       reward_weights=None)


class Killed(Exception):
    """Stands for the SIGKILL that ends a build mid-batch (what was sampled but not written is lost)."""


def _record_ids(path) -> list[str]:
    store = TraceStore(path)
    try:
        return sorted(i for page in store.iter_batches(include=()) for i in page["ids"])
    finally:
        store.close()


def test_a_resumed_build_stores_the_same_records(tmp_path, monkeypatch):
    def script(name):
        return RAPOScriptArguments(task="arithmetic", train_size=12, num_samples=SAMPLES, keep_top_k=1,
                                   expert_error_rate=0.5, store_path=str(tmp_path / name))  # fmt: skip

    build_store.run(script("whole"), ARGS, None)

    expert = build_store._expert_agent

    def dies_after_ten_questions(*args):
        agent, calls = expert(*args), []

        def counted(prompt):
            calls.append(prompt)
            if len(calls) > 10 * SAMPLES:  # in the second batch of 8 questions
                raise Killed
            return agent(prompt)

        return counted

    monkeypatch.setattr(build_store, "_expert_agent", dies_after_ten_questions)
    with pytest.raises(Killed):
        build_store.run(script("resumed"), ARGS, None)
    assert 0 < len(_record_ids(tmp_path / "resumed")) < len(_record_ids(tmp_path / "whole"))
    monkeypatch.setattr(build_store, "_expert_agent", expert)
    build_store.run(script("resumed"), ARGS, None)  # a new run: the expert starts afresh
    assert _record_ids(tmp_path / "resumed") == _record_ids(tmp_path / "whole")
