"""bench_comparison_gpu: its recipe is the CPU comparison's at 256 rollouts a step, a run still training at the
deadline gets SIGTERM (a finished one does not), and a stopped run is scored from its newest checkpoint."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.helpers.benchmarks import ROOT, load_bench

STOPS_ON_SIGTERM = """
import pathlib, signal, sys, time
def stop(signum, frame):
    pathlib.Path(sys.argv[1]).write_text("stopped")
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
time.sleep(60)
"""


def test_the_gpu_recipe_is_the_cpu_recipe_at_256_rollouts_a_step():
    import yaml

    from rapo_trl.cli import parse_recipe

    bench = load_bench("bench_comparison_gpu")
    assert yaml.safe_load((ROOT / bench.RECIPE).read_text())["use_cpu"] is False  # here the CLI falls back to the CPU
    for arm in ("grpo", "rapo_guided_token"):
        _, gpu, _ = parse_recipe("train", ["--config", str(ROOT / bench.RECIPE), *bench.comparison.ARMS[arm]])
        _, cpu, _ = parse_recipe("train", ["--config", str(ROOT / bench.comparison.RECIPE),
                                           *bench.comparison.ARMS[arm]])
        assert gpu.per_device_train_batch_size * gpu.steps_per_generation == 256
        assert gpu.per_device_train_batch_size * gpu.gradient_accumulation_steps == 256  # one optimizer step a batch
        assert gpu.num_generations == 16
        assert gpu.num_hybrid_generations == (0 if arm == "grpo" else gpu.num_generations // 2)
        assert gpu.save_steps == 5
        for name in ("learning_rate", "temperature", "max_completion_length", "max_tool_calls", "retrieve_prob",
                     "retrieve_at", "retrieved_token_loss_weight", "retrieval_advantage_weight"):
            assert getattr(gpu, name) == getattr(cpu, name), name


def _run(bench, tmp_path, name, code):
    log = open(tmp_path / f"{name}.log", "w")
    process = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / f"{name}.stopped")])
    return bench.Run(name, tmp_path / name, [], process, log)


def test_a_run_still_training_at_the_deadline_is_stopped_and_a_finished_one_is_not(tmp_path):
    bench = load_bench("bench_comparison_gpu")
    slow = _run(bench, tmp_path, "slow", STOPS_ON_SIGTERM)
    quick = _run(bench, tmp_path, "quick", "")
    time.sleep(1.0)  # the slow one has set its handler
    bench.stop_at_deadline({"slow": slow, "quick": quick}, time.monotonic() + 1.0)
    assert slow.stopped and slow.process.returncode == 143
    assert (tmp_path / "slow.stopped").read_text() == "stopped"
    assert not quick.stopped and quick.process.returncode == 0 and not (tmp_path / "quick.stopped").exists()
    assert slow.seconds >= 1.0 and quick.seconds < slow.seconds


def test_a_stopped_run_is_scored_from_its_newest_checkpoint_and_a_finished_one_from_its_model(tmp_path):
    bench = load_bench("bench_comparison_gpu")
    run = bench.Run("arm", tmp_path / "arm", [], None, None)
    for step in (5, 10, 9):
        (run.output / f"checkpoint-{step}").mkdir(parents=True)
    (run.output / bench.comparison.WARM_START_DIR).mkdir()
    assert bench.scored_model(run) == run.output / "checkpoint-10"  # by step, not by name
    assert not (run.output / bench.comparison.WARM_START_DIR).exists()  # eval scores the trained model alone
    (run.output / "adapter_config.json").write_text("{}")
    assert bench.scored_model(run) == run.output
