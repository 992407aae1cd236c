"""bench_decode_step times every variant side by side on any adapter, and leaves the loop's own sampler in place."""

from __future__ import annotations

import json
import math

from tests.helpers.benchmarks import load_bench


def test_a_tiny_run_times_every_variant_and_writes_its_report(tiny_model_dir, tmp_path, monkeypatch):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import rapo_trl.rollout.backends.kv_decode as kv_decode
    from rapo_trl.rollout.backends.sampling import sample_tokens

    adapter = tmp_path / "sft-warm-start"
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])).save_pretrained(adapter)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(adapter)
    bench = load_bench("bench_decode_step")
    monkeypatch.setattr(bench, "RESULTS", tmp_path / "results")
    bench.main(["--model", str(adapter), "--rows", "4", "8", "--repeats", "2", "--profile", "--compile",
                "--compile_backend", "eager"])  # dynamo's graphs run eagerly: the wiring, without C++ codegen

    record = json.loads((tmp_path / "results" / "decode_step.json").read_text())
    assert record["rows"] == [4, 8] and record["profile"] and record["compile_seconds"] > 0
    assert list(record["step_ms"]) == ["4", "8"]
    for by_variant in record["step_ms"].values():
        assert list(by_variant) == ["sampler: torch.multinomial", "sampler: inverse CDF (the loop's)",
                                    "weights: adapter", "weights: merged",
                                    "compile: torch.compile of the decoder layer (merged)"]
        # A step's time is the difference of two timed runs: on a loaded machine it can come out at or below 0.
        assert all(len(times) == 2 and all(math.isfinite(t) for t in times) for times in by_variant.values())
    report = (tmp_path / "results" / "decode_step.md").read_text()
    assert "| 8 | sampler: torch.multinomial |" in report and "native_bf16" not in report
    assert "First compiled turn" in report
    assert kv_decode.sample_tokens is sample_tokens  # the swaps for the side-by-side run are undone
    layer_type = type(AutoModelForCausalLM.from_pretrained(tiny_model_dir).model.layers[0])
    assert not hasattr(layer_type.forward, "_torchdynamo_orig_callable")
