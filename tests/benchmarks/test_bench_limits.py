"""bench_limits measures at any size, and its limits are the arithmetic it states: bytes over bandwidth, FLOPs over
the matmul rate, the binding one."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.benchmarks import load_bench


def _bench():
    return load_bench("bench_limits")


# A 100M-parameter model: 90M in the layers' matmuls, a tied 10M head, no attention FLOPs unless a test sets them.
SHAPES = {"params": 100e6, "body_matmul_params": 90e6, "head_params": 10e6, "decode_read_params": 100e6,
          "layers": 10, "attention_width": 0, "kv_width": 50}


def test_the_measuring_functions_run_at_tiny_sizes():
    bench = _bench()
    for precision in ("fp32", "bf16"):
        run = bench.measure_matmul(precision, 16, 32, 8, repeats=2)
        assert run["shape"] == [16, 32, 8] and run["calls"] == 2
        assert run["flops_per_s"] >= run["median_flops_per_s"] > 0
    bandwidth = bench.measure_bandwidth(mib=1, repeats=2)
    assert bandwidth["repeats"] == 2 and bandwidth["read_bytes_per_s"] >= bandwidth["median_read_bytes_per_s"] > 0
    assert bandwidth["copy_bytes_per_s"] > 0


def test_model_shapes_count_a_known_config_built_offline():
    from transformers import LlamaConfig

    h, i, layers, vocab, kv = 64, 128, 2, 100, 2 * 16
    config = LlamaConfig(hidden_size=h, intermediate_size=i, num_hidden_layers=layers, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=16, vocab_size=vocab, tie_word_embeddings=True)
    shapes = _bench().model_shapes(config)
    body = layers * (2 * h * h + 2 * h * kv + 3 * h * i)
    assert shapes["body_matmul_params"] == body and shapes["head_params"] == vocab * h
    assert shapes["params"] == body + vocab * h + (2 * layers + 1) * h  # norms; the head is the embedding
    assert shapes["decode_read_params"] == shapes["params"] and shapes["tied_embeddings"]
    assert (shapes["attention_width"], shapes["kv_width"], shapes["layers"]) == (64, kv, layers)


def test_decode_reads_the_weights_once_a_step_and_takes_the_binding_bound():
    bench = _bench()
    # 100M bf16 weights = 200 MB a step at 10 GB/s: 20 ms for 16 rows = 800 tok/s; 16 x 200 MFLOP at 1 TFLOP/s: 3.2 ms
    limit = bench.decode_limit(SHAPES, rows=16, context=0, value_bytes=2, bandwidth=10e9, flops_per_s=1e12)
    assert limit["bound"] == "memory" and limit["tokens_per_s"] == pytest.approx(800)
    assert limit["compute_bound_tokens_per_s"] == pytest.approx(16 / 3.2e-3)
    # the KV cache: 16 rows x 100 tokens x 2 (K, V) x 10 layers x 50 x 2 bytes = 3.2 MB more
    cached = bench.decode_limit(SHAPES, rows=16, context=100, value_bytes=2, bandwidth=10e9, flops_per_s=1e12)
    assert cached["tokens_per_s"] == pytest.approx(16 / (203.2e6 / 10e9))
    # at 100 GFLOP/s compute binds: 3.2 GFLOP = 32 ms, 500 tok/s
    slow = bench.decode_limit(SHAPES, rows=16, context=0, value_bytes=2, bandwidth=10e9, flops_per_s=100e9)
    assert slow["bound"] == "compute" and slow["tokens_per_s"] == pytest.approx(500)
    # attention: 4 L w c FLOPs a row
    attending = bench.decode_limit({**SHAPES, "attention_width": 100}, rows=1, context=1000, value_bytes=2,
                                   bandwidth=1e15, flops_per_s=1e9)
    assert attending["flops_per_step"] == pytest.approx(200e6 + 4 * 10 * 100 * 1000)


def test_prefill_is_two_flops_per_weight_a_token():
    limit = _bench().prefill_limit(SHAPES, rows=2, prompt_tokens=100, value_bytes=4, bandwidth=1e15, flops_per_s=1e12)
    assert limit["bound"] == "compute"
    assert limit["flops"] == pytest.approx(200 * 2 * 90e6 + 2 * 2 * 10e6)  # the head on each row's last token
    assert limit["tokens_per_s"] == pytest.approx(200 / (limit["flops"] / 1e12))


def test_loss_is_four_p_t_with_frozen_weights_six_when_they_train_and_the_shared_prompt_counts_once():
    bench = _bench()
    lora = bench.loss_limit(SHAPES, prompt_tokens=0, completion_tokens=100, rows_per_prompt=1, value_bytes=4,
                            bandwidth=1e15, flops_per_s=1e12)
    assert lora["flops_per_row"] == pytest.approx(4 * 100e6 * 100) and lora["seconds_per_row"] == pytest.approx(0.04)
    full = bench.loss_limit(SHAPES, 0, 100, 1, 4, 1e15, 1e12, frozen_weights=False)
    assert full["seconds_per_row"] == pytest.approx(0.06)
    # a 100-token prompt run once for 2 rows: 150 body tokens a row, the head on the 100 completion tokens
    shared = bench.loss_limit(SHAPES, 100, 100, 2, 4, 1e15, 1e12)
    assert shared["row_tokens"] == 150
    assert shared["flops_per_row"] == pytest.approx(2 * (2 * 90e6 * 150 + 2 * 10e6 * 100))


def test_stage_limits_use_the_record_at_the_asked_precision_and_batch():
    bench = _bench()
    record = {"shapes": SHAPES, "bandwidth": {"read_bytes_per_s": 10e9},
              "matmul": {"fp32": {"flops_per_s": 1e12}, "bf16": {"flops_per_s": 1e11}},
              "inputs": {"decode_rows": 16, "rows_per_prompt": 2, "prompt_tokens": 0, "completion_tokens": 100,
                         "frozen_weights": True}}
    fp32, bf16 = bench.stage_limits(record, "fp32"), bench.stage_limits(record, "bf16")
    assert fp32["decode"]["tokens_per_s"] == pytest.approx(16 / (400e6 / 10e9 + 16 * 50 * 2 * 10 * 50 * 4 / 10e9))  # context p + c/2
    assert bf16["loss"]["seconds_per_row"] == pytest.approx(4 * 100e6 * 100 / 1e11)
    assert bench.stage_limits(record, "fp32", decode_rows=8)["decode"]["seconds"] < fp32["decode"]["seconds"]


def test_decode_takes_the_rates_measured_at_the_nearest_row_count_the_head_apart():
    bench = _bench()
    record = {"shapes": SHAPES, "bandwidth": {"read_bytes_per_s": 1e15},  # compute-bound: the rates decide
              "matmul": {"fp32": {"flops_per_s": 1e12}},
              "decode_matmul": {"fp32": {"8": {"body_flops_per_s": 1e11, "head_flops_per_s": 5e10},
                                         "64": {"body_flops_per_s": 4e11, "head_flops_per_s": 2e11}}},
              "inputs": {"decode_rows": 16, "rows_per_prompt": 2, "prompt_tokens": 10, "completion_tokens": 10,
                         "frozen_weights": True}}  # no attention FLOPs (width 0): the matmuls alone
    at_16 = bench.stage_limits(record, "fp32")["decode"]  # nearest measured: 8 rows
    assert at_16["seconds"] == pytest.approx(16 * 2 * 90e6 / 1e11 + 16 * 2 * 10e6 / 5e10)
    at_48 = bench.stage_limits(record, "fp32", decode_rows=48)["decode"]  # nearest: 64 rows
    assert at_48["seconds"] == pytest.approx(48 * 2 * 90e6 / 4e11 + 48 * 2 * 10e6 / 2e11)
    older = {k: v for k, v in record.items() if k != "decode_matmul"}  # a record from before: the square's rate
    assert bench.stage_limits(older, "fp32")["decode"]["seconds"] == pytest.approx(16 * 2 * 100e6 / 1e12)
    measured = bench.measure_decode_matmuls({"hidden": 8, "intermediate": 16, "head_params": 8 * 32}, [2, 4], repeats=1)
    assert set(measured) == {"fp32", "bf16"} and set(measured["fp32"]) == {"2", "4"}
    assert all(r["body_flops_per_s"] > 0 and r["head_flops_per_s"] > 0 for r in measured["bf16"].values())


def test_bench_step_reports_each_arm_against_the_limits_of_its_own_cpu_only(tmp_path):
    import json

    step = load_bench("bench_step")
    machine = {"cpu": "cpu A", "cpus": 2, "native_bf16": False}
    record = {"machine": {**machine, "date": "today"}, "shapes": SHAPES,
              "bandwidth": {"read_bytes_per_s": 10e9}, "matmul": {"fp32": {"flops_per_s": 1e12}},
              "inputs": {"decode_rows": 16, "rows_per_prompt": 2, "prompt_tokens": 0, "completion_tokens": 100,
                         "frozen_weights": True}}
    path = tmp_path / "limits.json"
    path.write_text(json.dumps(record))
    run = {"precision": "fp32", "rollouts_per_hour": 100, "completion_tokens_per_hour": 10_000,
           "generate_tokens_per_s": 40.0, "loss_s_per_rollout": 0.08,
           "batch": {"per_device_train_batch_size": 1, "steps_per_generation": 8, "share_prompt_forward": False}}
    report = {"machine": machine, "runs": {"old_recipe": run}}
    arm = step.of_limits(report, path)["arms"]["old_recipe"]
    # 8 rows at context 50: 400 MB of weights + 8 x 50 x 2 x 10 x 50 x 4 bytes of cache at 10 GB/s
    assert arm["decode_limit_tok_s"] == pytest.approx(8 / (400e6 + 8 * 50 * 2 * 10 * 50 * 4) * 10e9, abs=0.05)  # to 0.1
    # row by row the loss reads the weights twice a row (800 MB fp32 at 10 GB/s: 0.08 s), over 4 P T's 0.04 s
    assert arm["loss_limit_s_per_row"] == pytest.approx(0.08) and arm["loss_fraction"] == pytest.approx(1.0)
    assert "old_recipe: decode" in step.limit_lines(step.of_limits(report, path))
    assert step.of_limits({**report, "machine": {**machine, "cpu": "cpu B"}}, path) is None
    assert step.of_limits({**report, "machine": {**machine, "native_bf16": True}}, path) is None
    assert step.of_limits(report, tmp_path / "none.json") is None


def test_bench_step_names_paths_relative_to_the_repository():
    step = load_bench("bench_step")
    assert step.shown_path(step.RESULTS / "limits.json") == "benchmarks/results/limits.json"
    assert step.shown_path(Path.home() / ".cache" / "m") == "~/.cache/m"
    assert step.shown_path("/opt/elsewhere/m") == "/opt/elsewhere/m"


def test_bench_step_runs_engine_settings_as_arms_beside_the_recipe():
    step = load_bench("bench_step")
    assert {"rapo_merged", "rapo_matmul_head", "rapo_merged_matmul_head"} <= set(step.ARMS)
    assert step.ENGINE_ARMS["rapo_merged"] == {"merged_weights": True}
    from rapo_trl.rollout.backends.decode_model import DecodeModel

    for settings in step.ENGINE_ARMS.values():  # each arm's settings build a decode model
        DecodeModel(**settings)
