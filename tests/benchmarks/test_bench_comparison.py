"""bench_comparison: every arm's flags parse as the CLI's on the comparison recipe, the report pairs seeds against GRPO
and reads the on-policy curves, and a recorded run is not run again."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers.benchmarks import ROOT, load_bench


def _record(arm, seed, fresh, on_policy, commit="c0ffee", heldout=3, code="new"):
    return {"arm": arm, "seed": seed, "commit": commit, "code": code, "flags": ["--seed", str(seed), "--max_steps", "30",
                                                                          "--retrieve_at", "plan"], "machine": {"cpu": "test CPU", "cpus": 2},
            "per_step": {"reward": [x + 0.5 for x in on_policy], "rapo/reward_on_policy": on_policy,
                         "rapo/retrieved_answer_share": [0.25] * len(on_policy)},
            "eval": {"reward_only_fresh": {"mean@k": fresh, "correct": 2, "n": 64},
                     "heldout_stories": {"correct": heldout, "n": 64}}}


def test_the_grpo_arms_leave_no_retrieval_option_of_the_recipes_to_warn_of(caplog):
    import logging

    from rapo_trl.cli import parse_recipe
    from rapo_trl.trainer.checks import warn_if_options_ignored

    bench = load_bench("bench_comparison")
    for recipe in ("configs/comparison_cpu.yaml", "configs/comparison_gpu.yaml"):
        for arm in ("grpo", "sft_then_grpo"):
            _, rapo_args, _ = parse_recipe("train", ["--config", str(ROOT / recipe), *bench.ARMS[arm]])
            with caplog.at_level(logging.WARNING, logger="rapo_trl.trainer"):
                warn_if_options_ignored(rapo_args, "tags", store=None)
    assert not [r.getMessage() for r in caplog.records if "no effect" in r.getMessage()]


def test_every_arms_flags_are_the_clis():
    from rapo_trl.cli import parse_recipe

    bench = load_bench("bench_comparison")
    parsed = {}
    for arm, flags in bench.ARMS.items():
        script, args, _ = parse_recipe("train", ["--config", str(ROOT / bench.RECIPE), "--seed", "1", "--sft_seed",
                                                 "0", *flags])
        parsed[arm] = (script, args)
        assert args.seed == 1 and script.sft_seed == 0
    assert parsed["grpo"][1].retrieve_prob == 0 and parsed["grpo"][1].num_hybrid_generations == 0
    assert parsed["rapo_paper"][1].retrieve_prob > 0 and parsed["rapo_guided"][1].retrieve_prob > 0
    assert parsed["sft_then_grpo"][0].sft_store_steps > 0 and parsed["sft_then_grpo"][1].retrieve_prob == 0
    assert parsed["rapo_guided"][1].retrieve_at == ["plan"] and parsed["rapo_paper"][1].retrieve_at == ["tool_step"]
    follow_up_script, follow_up = parsed["sft_then_rapo_guided"]
    assert follow_up_script.sft_store_steps == parsed["sft_then_grpo"][0].sft_store_steps
    assert follow_up.retrieve_at == ["plan"] and follow_up.retrieve_prob == parsed["rapo_guided"][1].retrieve_prob
    assert bench.parse_args([]).arms == ["grpo", "rapo_paper", "rapo_guided", "sft_then_grpo"]  # the follow-up on request
    levers = {arm: args for arm, (_, args) in parsed.items() if arm.startswith(("rapo_guided_", "sft_then_rapo_guided_"))}
    assert len(levers) == 6 and all(args.retrieve_at == ["plan"] for args in levers.values())
    token = parsed["rapo_guided_token"][1]
    assert token.retrieved_token_loss_weight == 2 and token.retrieved_token_shaping is None  # log-likelihood
    for arm in ("rapo_guided_token_failed", "rapo_guided_failed", "sft_then_rapo_guided_token_failed"):
        assert levers[arm].retrieve_failed_groups_max_reward == 0 and levers[arm].retrieve_prob == 1
    assert levers["rapo_guided_failed"].retrieved_token_loss_weight == 0
    assert levers["rapo_guided_token_anneal"].retrieve_prob_final == 0
    assert levers["rapo_guided_token_onpolicy"].advantage_baseline == "on_policy"
    assert token.advantage_baseline == "group" and token.retrieve_failed_groups_max_reward is None
    assert parsed["sft_then_rapo_guided_token_failed"][0].sft_store_steps == bench.SFT_STORE_STEPS
    assert parsed["rapo_guided_token_failed"][0].sft_store_steps == 0
    assert all(script.sft_retrieved_share > 0 for script, _ in parsed.values())  # one warm start for every arm
    prefix = {arm: parsed[arm] for arm in ("rapo_prefix_token_failed", "sft_then_rapo_prefix_token_failed")}
    for arm, (script, args) in prefix.items():
        guided_script, guided = parsed[arm.replace("prefix", "guided")]
        assert args.retrieve_at == ["start"] and args.retrieved_step_as_own and not guided.retrieved_step_as_own
        assert script.sft_store_steps == guided_script.sft_store_steps
        for field in ("retrieved_token_loss_weight", "retrieved_token_shaping", "retrieve_failed_groups_max_reward",
                      "retrieve_prob"):
            assert getattr(args, field) == getattr(guided, field), (arm, field)


def test_the_report_pairs_seeds_against_grpo_and_finds_when_an_arm_reaches_grpos_final_reward(tmp_path):
    bench = load_bench("bench_comparison")
    report = load_bench("learning_comparison_report")
    flat, rising = [0.1] * 10, [0.1 * i for i in range(10)]  # rising: its 5-step mean first reaches 0.1 at step 5
    records = [_record("grpo", 0, 0.10, flat), _record("grpo", 1, 0.20, flat), _record("grpo", 2, 0.30, flat),
               _record("rapo_paper", 0, 0.20, rising), _record("rapo_paper", 1, 0.30, rising),
               _record("rapo_paper", 2, 0.40, rising, heldout=5), _record("grpo", 0, 0.9, flat, code="old")]
    records.insert(0, records.pop())  # the older code's run recorded first
    md, png = tmp_path / "comparison.md", tmp_path / "comparison.png"
    report.write(records, md, png, list(bench.ARMS))
    text = md.read_text()
    assert text.index("## Code new") < text.index("## Code old")  # newest first; runs never pooled across code
    rapo = next(line for line in text.splitlines() if line.startswith("| rapo_paper"))
    cells = [cell.strip() for cell in rapo.strip("|").split("|")]
    assert cells[1] == "--retrieve_at plan"  # the run's own flags, without the seed and steps every run sets
    assert cells[2] == "3" and cells[3] == "0.200 0.300 0.400"
    assert cells[4] == "0.300 (0.052 to 0.548)"  # mean 0.3, sd 0.1, t(2) = 4.303
    assert cells[5] == "+0.100 (+0.100 to +0.100)"  # the same +0.1 at every seed: paired, no spread
    assert cells[6] == cells[7] == "-"  # records without per-question counts pair no question
    assert cells[9] == "11/192"  # held-out greedy pooled over seeds
    assert cells[10] == "0.700"  # the mean of the last five on-policy rewards, not of the reward with hybrid rows
    assert cells[11] == "5"
    assert png.is_file()
    # the older version keeps a plot of its own, linked from its table
    older = report.version_plot(png, "old")
    assert older.is_file() and older != png and f"]({older.name})" in text
    # a plot the report no longer links (its version's place moved since) goes; the linked ones stay
    moved = report.version_plot(png, "new")
    moved.write_bytes(b"curves of an earlier draw")
    report.write(records, md, png, list(bench.ARMS))
    assert not moved.exists() and older.is_file() and png.is_file()


def test_a_recorded_run_is_skipped_and_one_of_other_code_or_flags_is_not(tmp_path, monkeypatch):
    bench = load_bench("bench_comparison")
    flags = bench.run_flags("grpo", 0, 30)
    path = tmp_path / "learning.json"
    path.write_text(json.dumps({"runs": [], "comparison": [{**_record("grpo", 0, 0.1, [0.1]), "code": "abc",
                                                             "flags": flags}]}))
    monkeypatch.setattr(bench, "JSON_PATH", path)
    assert bench.recorded("grpo", 0, "abc", flags)
    assert not bench.recorded("grpo", 1, "abc", flags) and not bench.recorded("grpo", 0, "def", flags)
    assert not bench.recorded("grpo", 0, "abc", bench.run_flags("grpo", 0, 40))


def test_the_code_version_is_the_package_and_the_recipe():
    bench = load_bench("bench_comparison")
    package, recipe = bench.code_version().split("-")
    assert len(package) == len(recipe) == 12 and package != recipe
    assert bench.parse_args([]).recipe == bench.RECIPE
    other = bench.parse_args(["--recipe", "configs/demo_cpu.yaml"]).recipe
    other_package, other_recipe = bench.code_version(other).split("-")
    assert other_package == package and other_recipe != recipe  # the chosen recipe's settings, not the default's


def test_an_eval_record_keeps_each_sets_questions_and_their_correct_counts(tmp_path, monkeypatch):
    bench = load_bench("bench_comparison")
    trained = {"mean@k": 0.5, "correct": 1, "n": 2, "correct_by_question": [1, 0], "sampled_correct_by_question": [3, 1]}
    sets = {name: {"n": 2, "rows": {"trained": trained}, "question_ids": [f"{name}-a", f"{name}-b"]}
            for name in (bench.FRESH, bench.HELDOUT)}
    (tmp_path / "eval_results.json").write_text(json.dumps({"sets": sets}))
    monkeypatch.setattr(bench, "run_rapo", lambda *arguments: None)
    scores, _ = bench.evaluate(tmp_path, tmp_path / "store")
    fresh = scores[bench.FRESH]
    assert fresh["question_ids"] == [f"{bench.FRESH}-a", f"{bench.FRESH}-b"]
    assert fresh["correct_by_question"] == [1, 0] and fresh["sampled_correct_by_question"] == [3, 1]
    assert {"entropy", "completions/mean_length", "rapo/retrieved_token_logp"} <= set(bench.LOGGED)


def test_a_rescore_scores_recorded_runs_again_on_more_questions_and_keeps_their_own_results(tmp_path, monkeypatch):
    bench = load_bench("bench_comparison")
    path = tmp_path / "learning.json"
    flags = bench.run_flags("grpo", 0, 30)
    path.write_text(json.dumps({"comparison": [{**_record("grpo", 0, 0.2, [0.1]), "code": "abc", "flags": flags}]}))
    monkeypatch.setattr(bench, "JSON_PATH", path)
    model = tmp_path / "runs" / "grpo-seed0"
    model.mkdir(parents=True)
    (model / "eval_results.json").write_text("the record's own 64-question results")
    calls = []

    def fake_eval(*arguments):
        calls.append(arguments)
        report = Path(arguments[arguments.index("--eval_report") + 1])
        sets = {bench.FRESH: {"rows": {"trained": {"mean@k": 0.25, "correct": 40, "n": 128}},
                              "question_ids": [f"q{i}" for i in range(128)]}}
        report.write_text(json.dumps({"sets": sets}))
        (model / "eval_results.json").write_text(report.read_text())  # rapo eval also writes into the model folder

    monkeypatch.setattr(bench, "run_rapo", fake_eval)
    args = bench.parse_args(["--arms", "grpo", "rapo_guided", "--seeds", "0", "--rescore", "128"])
    version = {"commit": "c0ffee", "code": "abc"}
    bench.rescore_recorded(args, tmp_path / "runs", tmp_path / "store", version)
    bench.rescore_recorded(args, tmp_path / "runs", tmp_path / "store", version)  # recorded: not scored twice

    assert len(calls) == 1  # rapo_guided has no record on this code: nothing to rescore
    arguments = calls[0]
    assert arguments[arguments.index("--eval_size") + 1] == arguments[arguments.index("--eval_sample_size") + 1] == "128"
    assert arguments[arguments.index("--eval_splits") + 1 :][:2] == (bench.FRESH, "--eval_sampled_splits")
    assert (model / "eval_results.json").read_text() == "the record's own 64-question results"
    [record] = json.loads(path.read_text())["rescored"]
    assert (record["arm"], record["seed"], record["questions"], record["code"]) == ("grpo", 0, 128, "abc")
    assert record["eval"][bench.FRESH]["mean@k"] == 0.25 and len(record["eval"][bench.FRESH]["question_ids"]) == 128
    assert (model / "eval_results_128_fresh.json").exists()


def _scored(seed, ids, passes):
    return {"seed": seed, "eval": {"reward_only_fresh": {"k": 4, "question_ids": ids,
                                                         "sampled_correct_by_question": passes}}}


def test_per_question_differences_pair_the_same_question_and_seed_and_resample_questions_whole():
    report = load_bench("paired_questions")
    arm = [_scored(0, ["a", "b", "c"], [4, 2, 0]), _scored(1, ["a", "b", "c"], [3, 3, 1])]
    reference = [_scored(0, ["c", "a", "b"], [0, 2, 2]), _scored(1, ["b", "a"], [1, 1]), _scored(2, ["a"], [0])]
    differences = report.per_question_difference(arm, reference)
    # question order differs between the records; seed 1's reference never scored c; seed 2 has no arm run
    assert differences == {"a": [0.5, 0.5], "b": [0.0, 0.5], "c": [0.0]}
    mean, low, high = report.cluster_bootstrap(differences)
    assert mean == 0.3 and low <= mean <= high
    # each question's seeds move together: a bootstrap mean is some weighted mix of whole questions' values
    assert 0.0 <= low and high <= 0.5
    always_better = report.cluster_bootstrap({q: [0.25, 0.5] for q in "abcdefgh"})
    assert always_better[1] > 0


def test_a_killed_run_goes_on_from_its_newest_whole_checkpoint_and_a_fresh_one_starts_clean(tmp_path, monkeypatch):
    from rapo_trl.cli import parse_recipe

    bench = load_bench("bench_comparison")
    common = bench.train_from_shared_warm_start.__globals__
    commands = []
    monkeypatch.setitem(common, "run_rapo", lambda *arguments: commands.append(arguments))
    shared = tmp_path / "sft-warm-start"
    shared.mkdir()
    output = tmp_path / "arm-seed0"
    for step, whole in ((3, True), (4, False)):  # checkpoint-4's save was killed: no trainer_state.json
        (output / f"checkpoint-{step}").mkdir(parents=True)
        if whole:
            (output / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (output / "steps.jsonl").write_text("{}")

    _, resumed_from = bench.train_from_shared_warm_start(output, shared, "--seed", "0", *bench.CHECKPOINTS, resume=True)
    assert resumed_from == 3 and (output / "steps.jsonl").exists()  # the killed run's files kept
    assert commands[-1][-2:] == ("--resume_from_checkpoint", str(output / "checkpoint-3"))
    assert not (output / shared.name).exists()  # the warm start copy removed after training, as in a fresh run

    _, resumed_from = bench.train_from_shared_warm_start(output, shared, "--seed", "0")
    assert resumed_from == 0 and not (output / "steps.jsonl").exists() and "--resume_from_checkpoint" not in commands[-1]
    bench.remove_checkpoints(output)
    assert not list(output.glob("checkpoint-*"))
    _, args, _ = parse_recipe("train", ["--config", str(ROOT / bench.RECIPE), *bench.CHECKPOINTS])
    assert args.save_strategy == "steps" and args.save_steps == 1 and args.save_total_limit == 2
