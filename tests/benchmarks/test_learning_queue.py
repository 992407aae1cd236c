"""The protocol's queue: its lanes name runs the bench can make, records are copied once, and the warm-start check
reads a differing step."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

from tests.helpers.benchmarks import load_bench


def _record(arm, seed, recorded, code="v"):
    return {"arm": arm, "seed": seed, "code": code, "recorded": recorded}


def test_each_line_runs_arms_the_bench_knows_and_no_run_twice():
    queue, bench = load_bench("learning_queue"), load_bench("bench_comparison")
    for line in queue.LINES.values():
        for plan in (line.lanes, tuple(a + b for a, b in zip(line.rebuilt_lanes, line.rebuilt_screening, strict=True))):
            runs = [run for lane in plan for run in lane]
            assert {arm for arm, _ in runs} <= {*bench.ARMS, "warm_start"}
            assert len(runs) == len(set(runs))
    assert queue.WARM_START_DIR == bench.WARM_START_DIR


def test_the_fp32_line_pairs_each_pick_with_its_reference_over_five_seeds():
    queue = load_bench("learning_queue")
    runs = {run for lane in queue.LINES["fp32"].lanes for run in lane}
    for arm in ("grpo", queue.J, "sft_then_grpo", queue.E):
        assert {seed for name, seed in runs if name == arm} == set(range(5))
    # a pick and its reference share a lane, so each seed's pair finishes together
    for lane in queue.LINES["fp32"].lanes:
        arms = {arm for arm, _ in lane} - {"warm_start"}
        assert arms in ({"grpo", queue.J}, {"sft_then_grpo", queue.E})


def test_each_line_runs_on_the_cpus_whose_precision_rule_picks_its_arithmetic(monkeypatch):
    queue = load_bench("learning_queue")
    import rapo_trl.hardware as hardware

    for computes_bf16, name in ((True, "bf16"), (False, "fp32")):
        monkeypatch.setattr(hardware, "cpu_computes_bf16", lambda computes_bf16=computes_bf16: computes_bf16)
        assert queue.line_of_this_cpu().name == name


def test_a_line_named_runs_only_where_its_arithmetic_is_the_cpus(monkeypatch):
    queue = load_bench("learning_queue")
    import rapo_trl.hardware as hardware

    monkeypatch.setattr(hardware, "cpu_computes_bf16", lambda: True)
    assert queue.line_of_this_cpu("bf16-fidelity").name == "bf16-fidelity"
    monkeypatch.setattr(hardware, "cpu_computes_bf16", lambda: False)
    with pytest.raises(SystemExit, match="bf16-fidelity line trains in bf16, this CPU in fp32"):
        queue.line_of_this_cpu("bf16-fidelity")


def test_the_fidelity_line_checks_against_the_bf16_lines_run_of_its_warm_start(tmp_path, monkeypatch, capsys):
    queue = load_bench("learning_queue")
    line = dataclasses.replace(queue.LINES["bf16-fidelity"], name="probe")
    check = line.check
    assert (check.arm, check.seed) == ("rapo_paper", 0)
    assert {arm for lane in line.lanes for arm, _ in lane} == {"rapo_paper_scored_blocks"}
    assert f'run_flags("{check.arm}", {check.seed}, 2)' in queue.CHECK_SCRIPT.format(
        workdir="w", steps=2, arm=check.arm, seed=check.seed)
    steps = [{"reward": 0.5, "loss": 0.25}, {"reward": 0.75, "loss": -0.125}]
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    monkeypatch.setattr(queue, "ROOT", checkout)
    monkeypatch.setattr(queue, "RESULTS", "learning.json")
    monkeypatch.setattr(queue, "git", lambda *arguments: None)
    monkeypatch.setattr(queue.subprocess, "run", lambda *arguments, **options: None)
    monkeypatch.setattr(queue, "worktree_python", lambda line, *arguments, **options: "code-new\n")

    def check_run(line, threads):
        (line.worktree / queue.WORKDIR / queue.WARM_START_DIR).mkdir(parents=True, exist_ok=True)
        return steps

    monkeypatch.setattr(queue, "check_run", check_run)
    (line.worktree / ".git").mkdir(parents=True)
    same = {"per_step": {"reward": [0.5, 0.75], "loss": [0.25, -0.125]}}
    other = {"per_step": {"reward": [0.5, 0.75], "loss": [0.25, -0.5]}}
    records = [{**_record(check.arm, check.seed, "t0", code=check.code), **other},  # the other warm start's
               {**_record(check.arm, check.seed, "t1", code="code-new"), **other, "warm_start": check.warm_start},
               {**_record(check.arm, check.seed, "t2", code=check.code), **same, "warm_start": check.warm_start}]
    (checkout / "learning.json").write_text(json.dumps({"comparison": records}))
    queue.prepare(line)
    state = queue.warm_start_state(line)
    assert state["records_one"]
    # its runs pair with the named warm start's, so each record carries the fingerprint even then
    made = queue.marked({"comparison": [_record("rapo_paper_scored_blocks", 0, "2999-01-01T00:00:00Z")]}, state, line)
    assert made["comparison"][0]["warm_start"] == state["fingerprint"]
    records[2]["per_step"] = other["per_step"]
    (checkout / "learning.json").write_text(json.dumps({"comparison": records}))
    shutil.rmtree(line.worktree / queue.WORKDIR)
    queue.prepare(line)
    assert "step 2 loss: -0.125 here, -0.5 in the record" in capsys.readouterr().out
    assert not queue.warm_start_state(line)["records_one"]


def test_a_sync_copies_the_records_this_checkout_lacks_once_and_in_order():
    queue = load_bench("learning_queue")
    ours = {"comparison": [_record("grpo", 0, "t0")]}
    theirs = {"comparison": [_record("grpo", 0, "t0"), _record("sft_then_grpo", 2, "t2"), _record("grpo", 3, "t3")],
              "rescored": [{**_record("grpo", 0, "t4"), "questions": 128}]}
    assert queue.merged(ours, theirs) == 3
    assert [r["recorded"] for r in ours["comparison"]] == ["t0", "t2", "t3"]
    assert ours["rescored"][0]["questions"] == 128
    assert queue.merged(ours, theirs) == 0
    assert len(ours["comparison"]) == 3


def test_the_warm_start_check_names_each_step_that_differs_from_the_record():
    queue = load_bench("learning_queue")
    record = {"per_step": {"reward": [0.1875, 0.375, 0.5], "loss": [0.01, -0.02, 0.03]}}
    same = [{"reward": 0.1875, "loss": 0.01}, {"reward": 0.375, "loss": -0.02}]
    assert queue.check_steps(same, record, 2) == []
    other_loss = [{"reward": 0.1875, "loss": 0.01}, {"reward": 0.375, "loss": -0.0201}]
    assert queue.check_steps(other_loss, record, 2) == ["step 2 loss: -0.0201 here, -0.02 in the record"]
    assert queue.check_steps(same[:1], record, 2) == ["the check run logged 1 steps, not 2"]


def test_the_recorded_run_found_is_of_the_asked_code_and_warm_start():
    queue = load_bench("learning_queue")
    records = [_record("grpo", 0, "t0", code="old"), {**_record("grpo", 0, "t1", code="new"), "warm_start": "abc"},
               _record("grpo", 0, "t2", code="new")]
    assert queue.recorded_run(records, "grpo", 0, "new")["recorded"] == "t2"
    assert queue.recorded_run(records, "grpo", 0, "new", "abc")["recorded"] == "t1"
    assert queue.recorded_run(records, "grpo", 1, "new") is None


def test_prepare_builds_the_warm_start_on_the_lines_threads_and_checks_on_one(tmp_path, monkeypatch, capsys):
    queue = load_bench("learning_queue")
    steps = [{"reward": 0.5, "loss": 0.25}, {"reward": 0.75, "loss": -0.125}]
    checkout = tmp_path / "checkout"  # the worktree goes beside it
    results = checkout / "learning.json"
    checkout.mkdir()
    monkeypatch.setattr(queue, "ROOT", checkout)
    monkeypatch.setattr(queue, "RESULTS", results.relative_to(checkout))
    monkeypatch.setattr(queue, "git", lambda *arguments: None)
    monkeypatch.setattr(queue.subprocess, "run", lambda *arguments, **options: None)
    monkeypatch.setattr(queue, "worktree_python", lambda line, *arguments, **options: "code-v\n")
    calls = []

    def check_run(line, threads):
        calls.append(threads)
        (line.worktree / queue.WORKDIR / queue.WARM_START_DIR).mkdir(parents=True, exist_ok=True)
        return steps

    monkeypatch.setattr(queue, "check_run", check_run)
    line = dataclasses.replace(queue.LINES["fp32"], name="probe")
    assert line.worktree.parent == tmp_path
    (line.worktree / ".git").mkdir(parents=True)

    queue.prepare(line)  # no record of the line yet: the warm start is built on its threads, nothing checked
    assert calls == [2]
    record = {"arm": "grpo", "seed": 0, "code": "code-v", "recorded": "t",
              "per_step": {"reward": [0.5, 0.75], "loss": [0.25, -0.125]}}
    results.write_text(json.dumps({"comparison": [record]}))
    queue.prepare(line)  # in place: made and checked by an earlier prepare of this worktree, nothing to check
    assert calls == [2]
    (line.worktree / queue.WORKDIR / queue.WARM_START_FILE).unlink()
    queue.prepare(line)  # in place but never checked: checked on one thread, not built again
    assert calls == [2, 1]
    shutil.rmtree(line.worktree / queue.WORKDIR)
    queue.prepare(line)  # rebuilt on two threads, then checked on one, as the records ran
    assert calls == [2, 1, 2, 1]
    assert queue.warm_start_state(line)["records_one"]
    shutil.rmtree(line.worktree / queue.WORKDIR)
    record["per_step"]["loss"][1] = -0.126
    results.write_text(json.dumps({"comparison": [record]}))
    queue.prepare(line)  # rebuilt unlike the records' one: said, and marked for the lanes and the records
    assert "step 2 loss: -0.125 here, -0.126 in the record" in capsys.readouterr().out
    assert not queue.warm_start_state(line)["records_one"]


def _line_with_warm_start(queue, tmp_path, weights=b"weights"):
    line = dataclasses.replace(queue.LINES["bf16"], name="probe")
    warm_start = line.worktree / queue.WORKDIR / queue.WARM_START_DIR
    (warm_start / "adapter").mkdir(parents=True)
    (warm_start / "adapter" / "adapter_model.safetensors").write_bytes(weights)
    (warm_start / "trainer_log.txt").write_text("not weights")
    return line


def test_the_fingerprint_reads_the_weights_alone(tmp_path, monkeypatch):
    queue = load_bench("learning_queue")
    monkeypatch.setattr(queue, "ROOT", tmp_path / "checkout")
    line = _line_with_warm_start(queue, tmp_path)
    warm_start = line.worktree / queue.WORKDIR / queue.WARM_START_DIR
    first = queue.fingerprint_of(warm_start)
    (warm_start / "trainer_log.txt").write_text("another log")
    assert queue.fingerprint_of(warm_start) == first
    (warm_start / "adapter" / "adapter_model.safetensors").write_bytes(b"other weights")
    assert queue.fingerprint_of(warm_start) != first


def test_a_rebuilt_warm_start_runs_whole_pairs_skips_those_held_and_marks_its_records(tmp_path, monkeypatch):
    queue = load_bench("learning_queue")
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    monkeypatch.setattr(queue, "ROOT", checkout)
    monkeypatch.setattr(queue, "RESULTS", "learning.json")
    line = _line_with_warm_start(queue, tmp_path)
    with pytest.raises(SystemExit, match="not been checked"):
        queue.run_lane(line, 0)
    state = queue.write_warm_start_state(line, records_one=False)
    pick, reference = line.rebuilt_lanes[0][0][0], line.rebuilt_lanes[0][1][0]
    held = {**_record(pick, line.rebuilt_lanes[0][0][1], "t", code="code-v"), "warm_start": state["fingerprint"]}
    (checkout / "learning.json").write_text(json.dumps({"comparison": [held]}))
    benched = []

    def worktree_python(line, *arguments, **options):
        if arguments[0] == "-c":
            return "code-v\n"
        benched.append(arguments[arguments.index("--arms") + 1:])
        return ""

    monkeypatch.setattr(queue, "worktree_python", worktree_python)
    monkeypatch.setattr(queue, "sync", lambda: None)
    queue.run_lane(line, 0)
    assert benched[0] == (reference, "--seeds", str(line.rebuilt_lanes[0][1][1]))
    assert len(benched) == len(line.rebuilt_lanes[0]) + len(line.rebuilt_screening[0]) - 1
    assert ("--eval-warm-start",) in benched
    before, after = _record("grpo", 3, "2000-01-01T00:00:00Z"), _record("grpo", 3, "2999-01-01T00:00:00Z")
    records = queue.marked({"comparison": [before, after], "task": "t"}, state, line)
    assert "warm_start" not in records["comparison"][0]
    assert records["comparison"][1]["warm_start"] == state["fingerprint"]
    assert queue.marked({"comparison": [after]}, {**state, "records_one": True}, line) == {"comparison": [after]}


def test_the_rebuilt_lanes_are_whole_pairs_each_in_one_lane():
    queue = load_bench("learning_queue")
    for line in (queue.LINES["bf16"], queue.LINES["fp32"]):
        for lane in line.rebuilt_lanes:
            assert len(lane) == len(set(lane)) and len(lane) % 2 == 0
            for (first, seed), (second, other_seed) in zip(lane[::2], lane[1::2], strict=True):
                assert seed == other_seed
                assert {first, second} in ({"grpo", queue.J}, {"sft_then_grpo", queue.E})


def test_a_screened_arm_follows_its_seed_0_reference_from_the_same_warm_start_in_its_lane():
    queue = load_bench("learning_queue")
    reference_of = {"rapo_guided_token": "rapo_guided", "rapo_guided_failed": "rapo_guided",
                    "rapo_guided_token_anneal": "rapo_guided", "sft_then_rapo_guided": "sft_then_grpo",
                    "rapo_paper_scored_blocks": "rapo_paper"}
    screened = {arm for lane in queue.LINES["bf16"].rebuilt_screening for arm, _ in lane}
    assert set(reference_of) <= screened and "warm_start" in screened
    for lane in queue.LINES["bf16"].rebuilt_screening:
        order = [arm for arm, seed in lane if seed == 0]
        assert len(order) == len(lane)
        for arm in order:
            if arm in reference_of:
                assert reference_of[arm] in order[:order.index(arm)]
