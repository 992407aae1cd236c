"""bench_learning's stories start asks the demo's primary yardstick: the same split, the same questions."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_learning", ROOT / "benchmarks" / "bench_learning.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_stories_start_scores_the_demos_fresh_reward_only_questions_and_never_trains_on_them():
    from rapo_trl.cli import parse_recipe
    from rapo_trl.cli.common import load_questions

    bench = _bench()
    script = parse_recipe("eval", ["--config", str(ROOT / "configs" / "demo_cpu.yaml")])[0]
    args = bench.parse_args(["--starts", "stories", "--train-size", str(script.train_size),
                             "--undemonstrated-eval-size", str(script.eval_size),
                             "--difficulty", str(script.task_difficulty)])
    _, rl_rows, eval_sets = bench.stories_rows(args)
    fresh = eval_sets[bench.FRESH]
    assert bench.FRESH == "reward_only_fresh" and bench.FRESH in bench.SAMPLED_SETS
    assert fresh["question"] == load_questions(script, "reward_only_fresh")["question"]
    assert rl_rows["question"] == load_questions(script, "train")["question"]
    assert not set(fresh["question"]) & set(rl_rows["question"])


def test_runs_with_dynamic_sampling_are_reported_as_their_own_variant():
    bench = _bench()
    args = bench.parse_args(["--dynamic-sampling", "--dynamic-sampling-max-rounds", "3"])
    settings = bench.settings(args)
    assert settings["dynamic_sampling_max_rounds"] == 3
    assert "dynamic_sampling_max_rounds" not in bench.settings(bench.parse_args([]))
    assert bench.variant({"arm": "grpo", "settings": settings}) == "grpo+dynamic"
    assert bench.variant({"arm": "sft", "settings": {**settings, "reward": "closeness"}}) == \
        "sft (time of grpo+closeness+dynamic)"
    assert bench.variant({"arm": "rapo", "settings": bench.settings(bench.parse_args([]))}) == "rapo"


def _record(arm, seed, fresh_after, series="s33"):
    evals = {"reward_only_fresh": [{"mean@k": 0.05, "pass@1": 0.02, "k": 4, "questions": 64},
                                   {"mean@k": fresh_after, "mean@k_ci95": [fresh_after - 0.03, fresh_after + 0.04],
                                    "pass@1": fresh_after, "k": 4}],
             "heldout": [{"mean@k": 0.06}, {"mean@k": 0.07}]}
    return {"arm": arm, "seed": seed, "start": "stories", "steps": 10, "evals": evals, "wall_s": 600.0,
            "steps_with_signal": 0.5, "retrieval_rate": 0.4 if arm != "grpo" else 0.0,
            "settings": {"series": series}}


def test_a_series_table_puts_each_arm_beside_grpo_with_an_interval_over_seeds():
    bench = _bench()
    runs = [_record("grpo", s, v) for s, v in enumerate((0.06, 0.07, 0.08))]
    runs += [_record("rapo_guided", s, v) for s, v in enumerate((0.10, 0.12, 0.14))]
    runs += [_record("rapo", 0, 0.5, series="other")]  # another series: not in this table
    lines = bench.series_table(runs, "s33")
    rows = {line.split(" | ")[0].strip("| "): line for line in lines if line.startswith("| ")}
    assert set(rows) == {"arm", "grpo", "rapo_guided"}
    guided = rows["rapo_guided"].split(" | ")
    assert guided[1] == "3" and "s0 0.100 (0.070-0.140)" in guided[2]
    assert guided[3] == "0.120 ± 0.020"
    lo, hi = (float(x) for x in guided[4].split("-"))
    assert (lo, hi) == (round(0.12 - 4.303 * 0.02 / 3 ** 0.5, 3), round(0.12 + 4.303 * 0.02 / 3 ** 0.5, 3))
    assert guided[5] == "+5.0"  # points above GRPO's 0.070
    assert bench.variant({"arm": "rapo", "settings": {"series": "s33"}}) == "rapo [s33]"
    assert bench.arm_settings("rapo_plan", 8)["retrieve_at"] == ["plan", "tool_step"]


def test_stories_start_retrieves_from_rl_questions_and_imitates_the_demonstrated_stories(tmp_path, monkeypatch):
    """Issue 42: the paper's store holds the off-policy agent's traces of the questions RL trains on; the warm start
    (and the sft arm) keep the demonstrated stories. A store of other questions (one built before) is refused."""
    from rapo_trl.embeddings import HashingEmbedder
    from rapo_trl.tools import PythonTool

    monkeypatch.setattr("rapo_trl.embeddings.default_embedder", lambda: HashingEmbedder())  # model-free, fast
    bench = _bench()
    args = bench.parse_args(["--starts", "stories", "--train-size", "4", "--undemonstrated-eval-size", "4",
                             "--stories-eval-size", "4", "--eval-size", "4", "--difficulty", "1"])
    sft_rows, rl_rows, eval_sets = bench.stories_rows(args)
    store, sft_store = bench.stories_stores(tmp_path, sft_rows, rl_rows, [PythonTool()])
    stored = store.to_dataset(include_embeddings=False)
    assert set(stored["question_id"]) == set(rl_rows["question_id"])
    assert set(sft_store.to_dataset(include_embeddings=False)["question_id"]) == set(sft_rows["question_id"])
    keys = " ".join(stored["key"])
    assert all(q in keys for q in rl_rows["question"])
    assert not any(q in keys for rows in eval_sets.values() for q in rows["question"])
    store.close()
    sft_store.close()
    # a store whose RL collection holds the demonstrated stories (the layout before issue 42) is not reused
    with pytest.raises(SystemExit, match="not this start's"):
        bench.stories_stores(tmp_path, sft_rows, sft_rows, [PythonTool()])
