"""bench_learning's stories start asks the demo's primary yardstick: the same split, the same questions."""

from __future__ import annotations

import importlib.util
from pathlib import Path

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
