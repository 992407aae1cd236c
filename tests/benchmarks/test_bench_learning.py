"""bench_learning's stories start asks the demo's primary yardstick: the same split, the same questions."""

from __future__ import annotations

import pytest

from tests.helpers.benchmarks import ROOT, load_bench


def _bench():
    return load_bench("bench_learning")


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
    assert bench.learning_report.variant({"arm": "grpo", "settings": settings}) == "grpo+dynamic"
    assert bench.learning_report.variant({"arm": "sft", "settings": {**settings, "reward": "closeness"}}) == \
        "sft (time of grpo+closeness+dynamic)"
    assert bench.learning_report.variant({"arm": "rapo", "settings": bench.settings(bench.parse_args([]))}) == "rapo"


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
    lines = bench.learning_report.series_table(runs, "s33", list(bench.GUIDED_ARMS))
    rows = {line.split(" | ")[0].strip("| "): line for line in lines if line.startswith("| ")}
    assert set(rows) == {"arm", "grpo", "rapo_guided"}
    guided = rows["rapo_guided"].split(" | ")
    assert guided[1] == "3" and "s0 0.100 (0.070-0.140)" in guided[2]
    assert guided[3] == "0.120 ± 0.020"
    lo, hi = (float(x) for x in guided[4].split("-"))
    assert (lo, hi) == (round(0.12 - 4.303 * 0.02 / 3 ** 0.5, 3), round(0.12 + 4.303 * 0.02 / 3 ** 0.5, 3))
    assert guided[5] == "+5.0"  # points above GRPO's 0.070
    assert bench.learning_report.variant({"arm": "rapo", "settings": {"series": "s33"}}) == "rapo [s33]"
    assert bench.arm_settings("rapo_plan", 8)["retrieve_at"] == ["plan", "tool_step"]


def test_a_run_record_keeps_the_retrieval_metrics_per_step():
    bench = _bench()
    logs = [{"reward": 0.5, "rapo/reward_on_policy": 0.25},
            {"reward": 0.7, "rapo/reward_on_policy": 0.5, "rapo/reward_hybrid_retrieved": 1.0,
             "rapo/retrieved_own_question_share": 0.75, "rapo/retrieved_answer_share": 0.25}]
    assert bench.learning_retrievals.per_step(logs) == {
        "reward_hybrid_retrieved": [None, 1.0], "reward_on_policy": [0.25, 0.5],
        "own_question_share": [None, 0.75], "answer_share": [None, 0.25]}


def test_the_report_has_a_per_step_table_of_rewards_by_retrieval_and_the_shares():
    bench = _bench()
    views = [{"reward_hybrid_retrieved": [0.5, None, 0.25], "reward_on_policy": [0.25, 0.5, 0.0],
              "own_question_share": [1.0, None, 0.5], "answer_share": [0.5, None, 0.0]},
             {"reward_hybrid_retrieved": [0.25, 0.75], "reward_on_policy": [0.0, 0.25],
              "own_question_share": [0.5, 0.5], "answer_share": [0.0, 1.0]}]
    rapo = [{**_record("rapo", seed, 0.1), "retrieval_view": view} for seed, view in enumerate(views)]
    grpo = [{**_record("grpo", 0, 0.1), "retrieval_view": {**views[1], "reward_hybrid_retrieved": [None, None]}}]
    lines = bench.learning_retrievals.report_lines({("stories", "rapo", 10): rapo, ("stories", "grpo", 10): grpo,
                                                    ("stories", "old", 10): [_record("rapo", 0, 0.1)]})
    assert sum(line.startswith("### Retrievals you can see") for line in lines) == 1  # rapo only: grpo and old none
    assert "stories start, rapo, 10 steps (2 seeds)" in lines[1]
    rows = [line.split(" | ") for line in lines if line.startswith("| ") and not line.startswith("| step")]
    # step 1: means over seeds; the difference is the mean of each seed's (shown - on-policy)
    assert rows[0] == ["| 1", "0.375", "0.125", "+0.250", "0.750", "0.250 |"]
    assert rows[1] == ["| 2", "0.750", "0.375", "+0.500", "0.500", "1.000 |"]  # seed 0 showed no stored step
    assert rows[2] == ["| 3", "0.250", "0.000", "+0.250", "0.500", "0.000 |"]  # only seed 0 ran a third step
    assert "hybrid shown a step 0.438, on-policy 0.188" in lines[3]  # whole run: mean over seeds of each run's mean


def test_report_only_still_reproduces_the_committed_report_from_old_records(tmp_path):
    import shutil

    results = ROOT / "benchmarks" / "results"
    for name in ("learning.json", "learning_notes.md"):
        shutil.copy(results / name, tmp_path / name)
    assert _bench().main(["--report-only", "--results", str(tmp_path)]) == 0
    assert (tmp_path / "learning.md").read_text() == (results / "learning.md").read_text()


def test_stories_start_retrieves_from_rl_questions_and_imitates_the_demonstrated_stories(tmp_path, monkeypatch):
    """The paper's store holds the off-policy agent's traces of the questions RL trains on; the warm start
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
    # a store whose RL collection holds the demonstrated stories, not the RL questions' traces, is not reused
    with pytest.raises(SystemExit, match="not this start's"):
        bench.stories_stores(tmp_path, sft_rows, sft_rows, [PythonTool()])


def _sampled_at(monkeypatch) -> list[float]:
    """Stands in for `evaluate_policy`: returns the temperatures mean@k is asked to sample at, one per call."""
    temperatures = []

    def evaluate_policy(model, tokenizer, rows, tools, *, samples, temperature, **kwargs):
        temperatures.append(temperature)
        return {"pass@1": 0.5, "n": 2, **({"mean@k": 0.25, "k": samples, "temperature": temperature} if samples else {})}

    monkeypatch.setattr("rapo_trl.evaluation.evaluate_policy", evaluate_policy)
    return temperatures


def test_mean_at_k_samples_at_the_training_temperature(monkeypatch):
    from types import SimpleNamespace

    bench = _bench()
    args = bench.parse_args(["--starts", "stories", "--temperature", "0.7"])
    temperatures = _sampled_at(monkeypatch)
    tracker = bench.HeldOutEval(1, None, {"heldout": []}, [], {}, {"heldout": {"pass@1": 0.0}},
                                bench.start_samples(args, "stories"), temperature=args.temperature)
    state, control = SimpleNamespace(global_step=1, max_steps=1), SimpleNamespace(should_training_stop=False)
    tracker.callback.on_step_begin(None, state, control)
    tracker.callback.on_step_end(None, state, control, model=None)
    assert temperatures == [0.7]
    assert tracker.detail["heldout"][-1]["temperature"] == 0.7  # the record says what mean@k sampled at


def test_the_start_is_scored_again_where_its_cached_mean_at_k_sampled_at_another_temperature(tmp_path, monkeypatch):
    import json

    bench = _bench()
    # a cache written before scores kept the temperature: mean@k sampled at evaluate_policy's default, 1.0
    (tmp_path / "eval0-stories.json").write_text(json.dumps({"heldout": {"pass@1": 0.5, "mean@k": 0.4, "k": 4},
                                                             "heldout_shapes": 0.3}))
    monkeypatch.setattr("rapo_trl.rollout.agent.load_policy", lambda path, device: (None, None))
    temperatures = _sampled_at(monkeypatch)
    eval_sets = {"heldout": [], "heldout_shapes": []}
    kept = bench.initial_eval(tmp_path, "stories", "model", eval_sets, [], {}, 4, temperature=1.0)
    assert temperatures == [] and kept["heldout"]["mean@k"] == 0.4
    again = bench.initial_eval(tmp_path, "stories", "model", eval_sets, [], {}, 4, temperature=0.7)
    assert temperatures == [0.7]  # the held-out set alone: heldout_shapes is greedy only
    assert again["heldout"]["temperature"] == 0.7 and again["heldout_shapes"] == 0.3
