"""bench_regime's reading of a run: per-row success of on-policy rows and of rows shown a stored step, and the
interval of their difference; every regime's flags parse as the CLI's."""

from __future__ import annotations

import pytest

from tests.helpers.benchmarks import ROOT, load_bench


def _row(reward, hybrid=False, shown=0, answer=False):
    return {"step": 1, "prompt": "p", "completion": "c", "rapo_outcome_reward": reward, "advantage": 0.0,
            "rapo_hybrid": hybrid, "rapo_stored_steps_shown": shown, "rapo_answer_step_shown": answer}


def test_success_is_counted_per_row_by_what_the_row_was_shown():
    bench = load_bench("bench_regime")
    rows = [_row(1.1), _row(0.0), _row(-1.0), _row(1.0),  # on-policy: 2 of 4 (1.1 is 1 plus the tool bonus)
            _row(1.0, hybrid=True, shown=1, answer=True), _row(0.5, hybrid=True, shown=2),  # shown: 1 of 2
            _row(1.0, hybrid=True, shown=0)]  # hybrid but shown nothing: neither
    logs = [{"rapo/retrieved_answer_share": 0.5, "rapo/retrieved_own_question_share": 1.0}, {}]
    got = bench.summary(rows, logs)
    assert got["on_policy"] == [2, 4] and got["shown_a_stored_step"] == [1, 2]
    assert got["rows_shown_an_answer_step"] == [1, 2]
    assert got["answer_share"] == 0.5 and got["own_question_share"] == 1.0
    low, high = got["difference_ci95"]
    assert low < 0.0 < high  # 1/2 against 2/4: no difference, and few rows


def test_the_difference_interval_excludes_zero_only_when_the_rates_differ_clearly():
    bench = load_bench("bench_regime")
    low, high = bench.difference_interval(60, 100, 20, 100)
    assert 0.25 < low < 0.4 < high < 0.55
    assert bench.difference_interval(0, 0, 1, 4) is None


def test_a_table_with_two_reward_columns_is_refused():
    with pytest.raises(ValueError, match="one reward column"):
        load_bench("bench_regime").reward_of({**_row(1.0), "closeness": 0.3})


def test_every_regimes_flags_are_the_clis():
    from rapo_trl.cli import parse_recipe

    bench = load_bench("bench_regime")
    for regime in bench.REGIMES.values():
        script, args, _ = parse_recipe("train", ["--config", str(ROOT / bench.RECIPE), *regime["store"],
                                                 *regime["train"], "--learning_rate", "0"])
        assert args.learning_rate == 0
        assert script.task_tool_steps in ("one", "per_operation")


def test_the_bench_reads_the_trainers_completion_columns():
    from rapo_trl.core.rows import RolloutRow
    from rapo_trl.trainer.retrieval_view import completion_columns

    columns = completion_columns([RolloutRow([1], completion_ids=[2], is_hybrid=True)])
    assert set(columns) == set(load_bench("bench_regime").RAPO_COLUMNS)
