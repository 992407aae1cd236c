"""bench_prefill_head runs the same greedy pass with the head on gathered rows and on a strided view, and puts the
loop's own choice back."""

from __future__ import annotations

import json

from tests.helpers.benchmarks import load_bench

RECIPE = """\
task: word_problems
task_difficulty: 1
eval_splits: [reward_only_fresh]
tools: [python]
max_completion_length: 24
max_turn_tokens: 12
"""


def test_a_tiny_run_times_both_variants_and_restores_the_loop(tiny_model_dir, tmp_path, monkeypatch):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import rapo_trl.rollout.backends.kv_decode as kv_decode

    gathered = kv_decode.last_position
    adapter = tmp_path / "trained"
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])).save_pretrained(adapter)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(adapter)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE)
    bench = load_bench("bench_prefill_head")
    monkeypatch.setattr(bench, "RESULTS", tmp_path / "results")
    bench.main(["--model", str(adapter), "--recipe", str(recipe), "--questions", "3", "--batch", "3", "--repeats", "2"])

    record = json.loads((tmp_path / "results" / "prefill_head.json").read_text())
    assert list(record["rounds"]) == [bench.GATHERED, bench.STRIDED]
    for rounds in record["rounds"].values():
        assert len(rounds) == 2 and all(r["cpu_s"] > 0 and r["prefill_forwards"] > 0 for r in rounds)
    # the tiny model's greedy turns are the same whichever way the head reads its rows
    assert record["identical_completions"] == 1.0
    assert "| gathered (the loop's) |" in (tmp_path / "results" / "prefill_head.md").read_text()
    assert kv_decode.last_position is gathered
