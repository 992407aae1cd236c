"""The signal-loss warning: flat groups or mostly truncated rollouts for several steps, said once."""

from __future__ import annotations

import logging

from rapo_trl.signal_monitor import SignalMonitor
from tests.helpers.trainers import batch_inputs, rapo_trainer, script

ALIVE = [0.0, 1.0, 0.0, 0.0]  # one group that still has variance
FLAT = [0.0, 0.0, 0.0, 0.0]


def test_flat_groups_warn_once_after_patience():
    monitor = SignalMonitor(patience=3)
    assert monitor.update(FLAT, 4, [False] * 4) == []
    assert monitor.update(FLAT, 4, [False] * 4) == []
    (message,) = monitor.update(FLAT, 4, [False] * 4)
    assert "equal for 3 steps" in message and "difficulty" in message
    assert monitor.update(FLAT, 4, [False] * 4) == []  # once


def test_one_group_with_variance_resets_the_count():
    monitor = SignalMonitor(patience=2)
    monitor.update(FLAT + FLAT, 4, [False] * 8)
    assert monitor.update(FLAT + ALIVE, 4, [False] * 8) == []
    assert monitor.update(FLAT, 4, [False] * 4) == []
    assert monitor.flat_steps == 1


def test_mostly_truncated_rollouts_warn():
    monitor = SignalMonitor(patience=2)
    assert monitor.update(ALIVE, 4, [True, True, True, False]) == []
    (message,) = monitor.update(ALIVE, 4, [True, True, True, False])
    assert "75% of rollouts were truncated" in message and "max_turn_tokens" in message


def test_half_truncated_is_not_mostly_and_zero_patience_disables():
    monitor = SignalMonitor(patience=1)
    assert monitor.update(ALIVE, 4, [True, True, False, False]) == []
    assert SignalMonitor(patience=0).update(FLAT, 4, [True] * 4) == []


def test_a_json_call_failing_on_its_worker_thread_names_the_option_once():
    sqlite = ("add", "ProgrammingError: SQLite objects created in a thread can only be used in that same thread.")
    monitor = SignalMonitor(patience=3, json_calls_on_workers=True)
    assert monitor.update_tools(2, [("lookup", "KeyError: 'x'")]) == []
    (message,) = monitor.update_tools(3, [sqlite])
    assert "json_tool_timeout=None" in message and "<add>: ProgrammingError: SQLite objects" in message
    assert monitor.update_tools(3, [sqlite]) == []  # once
    # Calls already on the trainer's thread, or a monitor switched off: nothing to advise.
    assert SignalMonitor(patience=3).update_tools(3, [sqlite]) == []
    assert SignalMonitor(patience=0, json_calls_on_workers=True).update_tools(3, [sqlite]) == []


def test_every_call_failing_warns_once_beside_the_thread_advice():
    monitor = SignalMonitor(patience=3, json_calls_on_workers=True)
    errors = [("add", "ProgrammingError: SQLite objects created in a thread can only be used in that same thread.")]
    thread_advice, all_failed = monitor.update_tools(1, errors)
    assert "json_tool_timeout=None" in thread_advice and "every tool call of the last step failed" in all_failed
    assert monitor.update_tools(1, errors) == []


def test_trainer_logs_the_warning_when_rewards_are_flat(tiny_model_dir, tmp_path, caplog):
    trainer = rapo_trainer(tiny_model_dir, tmp_path, signal_loss_patience=2)
    trainer.reward_funcs = [lambda completions, **kw: [1.0] * len(completions)]
    trainer.reward_func_names = ["constant"]
    trainer.model.train()
    with caplog.at_level(logging.WARNING, logger="rapo_trl.trainer"):
        for _ in range(2):
            script(trainer)
            trainer._generate_and_score_completions(batch_inputs())
    warnings = [r.getMessage() for r in caplog.records if "equal for" in r.getMessage()]
    assert len(warnings) == 1
    metrics = trainer._metrics["train"]
    assert len(metrics["rapo/skipped_retrievals"]) == 2  # logged every step
    assert metrics["rapo/store_errors"] == [0.0]  # a running count: its latest value, not one a step to average
