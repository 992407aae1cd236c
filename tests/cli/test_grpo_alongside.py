"""``grpo_alongside``: the GRPO baseline of ``grpo_same_rollouts`` trained in a second process while RAPO trains, from
the same warm start, ending as the baseline trained after RAPO ends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.cli.runs import describe, rapo_env

BASELINE = "grpo-same-rollouts"


def _logged_steps(folder) -> list[dict]:
    return [entry for entry in json.loads((folder / "trainer_state.json").read_text())["log_history"]
            if "reward" in entry]


def _adapter(folder) -> dict:
    from safetensors.torch import load_file

    return load_file(folder / "adapter_model.safetensors")


@pytest.mark.slow
@pytest.mark.rapo_runs("train-grpo-alongside")
def test_the_baseline_alongside_is_saved_whole_trained_with_retrieval_off_from_the_one_warm_start(cli_runs, cli_work):
    work, _ = cli_work
    run = cli_runs["train-grpo-alongside"]
    assert run.returncode == 0, describe(run)
    out = work / "grpo-alongside"
    grpo = out / BASELINE
    assert (grpo / "adapter_model.safetensors").is_file() and list((grpo / "plots").glob("*.png"))
    adapter = json.loads((grpo / "adapter_config.json").read_text())
    warm_adapter = json.loads((out / "sft-warm-start" / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == warm_adapter["base_model_name_or_path"]
    rapo_log, grpo_log = _logged_steps(out), _logged_steps(grpo)
    assert [entry["step"] for entry in grpo_log] == [entry["step"] for entry in rapo_log] == [1, 2]
    assert all(entry["rapo/hybrid_share"] > 0 and entry["rapo/retrieve_prob"] == 1.0 for entry in rapo_log)
    assert all(entry["rapo/hybrid_share"] == 0 and entry["rapo/retrieve_prob"] == 0 for entry in grpo_log)
    assert "training alongside RAPO in process" in run.stdout
    assert "GRPO baseline (retrieval off): trained 2 steps" in run.stdout
    # the second process started from the warm start the first one trained: there was one warm start
    assert run.stderr.count("SFT sft-warm-start:") == 1, describe(run)


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="pins a run to one core")
@pytest.mark.rapo_runs("train-sft", "train-grpo-alongside")
def test_the_baseline_alongside_trains_exactly_as_the_baseline_after_rapo(cli_runs, cli_work):
    """Both runs compute with one torch thread in every process (the run after RAPO by OMP_NUM_THREADS=1, the run
    alongside on one core, whose half is one thread), so the same seed gives the same rollouts, rewards, losses,
    gradients and adapter weights, bit for bit. The logged loss is 0.0 in both (the tiny model's rollouts all run to
    max_completion_length, and GRPO's loss of equally long rows is their advantages' mean, 0 within each group); the
    gradient norm and the saved weights carry the update."""
    work, _ = cli_work
    after, alongside = cli_runs["train-sft"], cli_runs["train-grpo-alongside"]
    assert after.returncode == 0, describe(after)
    assert alongside.returncode == 0, describe(alongside)
    keys = ("step", "reward", "reward_std", "loss", "grad_norm", "rapo/hybrid_share")
    for folder in (BASELINE, "."):  # the baseline's run, and RAPO's beside it
        after_log = [{key: entry[key] for key in keys} for entry in _logged_steps(work / "model-sft" / folder)]
        alongside_log = [{key: entry[key] for key in keys} for entry in _logged_steps(work / "grpo-alongside" / folder)]
        assert alongside_log == after_log, folder
        assert any(entry["grad_norm"] > 0 for entry in after_log), after_log  # the steps updated the policy
        after_weights, alongside_weights = (_adapter(work / run / folder) for run in ("model-sft", "grpo-alongside"))
        assert after_weights.keys() == alongside_weights.keys()
        assert all(after_weights[name].equal(alongside_weights[name]) for name in after_weights), folder


@pytest.mark.slow
@pytest.mark.rapo_runs("train-grpo-alongside-fails")
def test_a_failed_baseline_alongside_is_named_once_rapo_is_saved(cli_runs, cli_work):
    work, _ = cli_work
    run = cli_runs["train-grpo-alongside-fails"]
    out = work / "grpo-alongside-fails"
    assert run.returncode == 2, describe(run)
    last = run.stderr.strip().splitlines()[-1]
    assert "the GRPO baseline trained alongside RAPO failed (exit code 1;" in last, describe(run)
    assert f"{out / BASELINE} is incomplete; RAPO's model is saved in {out}" in last
    assert "fails in the GRPO baseline's process" in run.stderr  # the second process's own report, before it
    assert (out / "adapter_model.safetensors").is_file() and (out / "trainer_state.json").is_file()
    assert not (out / BASELINE / "adapter_model.safetensors").exists()


def test_grpo_alongside_is_refused_without_its_baseline_or_under_several_processes_before_anything_loads(tmp_path):
    code = textwrap.dedent("""
        import contextlib, io, json, os, sys
        from rapo_trl.cli import main
        out = {}
        for name, flags, world_size in [("alone", [], "1"), ("launched", ["--grpo_same_rollouts", "true"], "2")]:
            os.environ["WORLD_SIZE"] = world_size
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                out[name] = (main(["train", "--model_name_or_path", "tiny", "--grpo_alongside", "true", *flags]),
                             err.getvalue())
        loaded = sorted(m for m in ("torch", "transformers", "trl", "datasets") if m in sys.modules)
        print(json.dumps({"out": out, "loaded": loaded}))
    """)
    run = subprocess.run([sys.executable, "-c", code], env=rapo_env(), capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    words = {"alone": "grpo_alongside trains the GRPO baseline of grpo_same_rollouts in a second process; set "
                      "grpo_same_rollouts: true as well",
             "launched": "not one beside each of 2 launched processes"}
    for name, (code_, err) in result["out"].items():
        lines = err.strip().splitlines()
        assert code_ == 2 and len(lines) == 1 and words[name] in lines[0], (name, err)
    assert result["loaded"] == []


def test_an_interrupted_rapo_run_ends_the_baseline_process_at_once(tiny_model_dir, tmp_path):
    import torch

    from rapo_trl.cli.grpo_alongside import grpo_alongside
    from rapo_trl.cli.recipe import parse_recipe

    script, rapo_args, model_args = parse_recipe("train", [
        "--model_name_or_path", str(tiny_model_dir), "--use_cpu", "true", "--output_dir", str(tmp_path),
        "--per_device_train_batch_size", "2", "--num_generations", "2", "--grpo_same_rollouts", "true",
        "--grpo_alongside", "true", "--report_to", "none"])
    threads = torch.get_num_threads()
    try:
        with pytest.raises(KeyboardInterrupt):
            with grpo_alongside(script, rapo_args, model_args, None) as process:
                raise KeyboardInterrupt
    finally:
        torch.set_num_threads(threads)
    assert not process.is_alive() and process.exitcode == -signal.SIGKILL
