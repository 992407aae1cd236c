"""Where a decode step of the KV-cache loop spends its time, and what one lever saves, side by side in one process.

    .venv/bin/python benchmarks/bench_decode_step.py --model runs/demo/model/sft-warm-start

The model is a warm start (a LoRA adapter over SmolLM2, as ``rapo train`` leaves it), loaded as RL loads it: frozen
weights at the precision rule's dtype, the adapter trainable. One turn of the engine's transformers backend decodes
``--rows`` rows (two prompts of different lengths, as a step's two questions are) at T = 0.7 with the entropy recorder
and a stop string, EOS suppressed so every row decodes the whole budget. A step's time is the difference of a
72-token and an 8-token turn over 64 steps, so the prefill cancels. Several ``--rows`` give each batch width its own
rows of the table (ms a step, ms a row-step), the cost per row as a wider batch amortises a step's fixed part.

Variants, interleaved over ``--repeats`` rounds so a change in the machine's load falls on all of them:
- ``sampler``: ``torch.multinomial`` (one exponential draw per vocabulary entry and row) against the loop's
  inverse-CDF ``sample_tokens``, both on merged weights;
- ``weights``: decoding through the adapter against merged weights;
- with ``--compile``, ``compile``: the model's decoder layer compiled by ``torch.compile`` (inductor, dynamic shapes:
  the batch shrinks and the cache grows every step), on merged weights, against ``weights: merged`` (eager); the
  seconds of the first compiled turn (compilation of every layer) are recorded apart.
``--profile`` adds torch.profiler's table of one turn (ops by self time).

Writes ``benchmarks/results/decode_step.{json,md}``, with the machine and its load average.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # common.py, however this is loaded
from common import (  # noqa: E402
    RESULTS,
    command_line,
    machine_info,
    machine_line,
    markdown_table,
    shown_path,
    use_offline_environment,
)

use_offline_environment()

QUESTION = ("A baker bakes 37 trays of 24 rolls, sells 118 rolls in the morning and packs the rest into bags of 6. "
            "How many bags does the baker fill? Use python.")


def load(model: str):
    """The warm start as RL loads it, its tokenizer, and the frozen weights' dtype."""
    from transformers import AutoTokenizer

    from rapo_trl.cli.warm_start import load_adapter_for_training
    from rapo_trl.hardware import default_precision, frozen_weights_dtype

    base = json.loads((Path(model) / "adapter_config.json").read_text())["base_model_name_or_path"]
    precision = default_precision("cpu")
    dtype = frozen_weights_dtype(precision == "bf16", precision == "fp16")
    policy = load_adapter_for_training(base, model, {"dtype": dtype} if dtype else {})
    return policy, AutoTokenizer.from_pretrained(model), dtype or "float32"


def turn_runner(policy, tokenizer, rows: int):
    """``run(merged, tokens)``: seconds for one turn of ``rows`` rows decoding ``tokens`` tokens each."""
    from transformers import LogitsProcessorList, SuppressTokensLogitsProcessor

    from rapo_trl.rollout.backends.base import SamplingSettings
    from rapo_trl.rollout.backends.transformers import TransformersBackend

    prompt = list(tokenizer.apply_chat_template([{"role": "user", "content": QUESTION}], add_generation_prompt=True,
                                                tokenize=True, return_dict=False))
    prompt += tokenizer(" The program printed the numbers of rolls and bags.", add_special_tokens=False)["input_ids"]
    sequences = [prompt] * (rows // 2) + [prompt[:-7]] * (rows - rows // 2)
    eos = sorted({tokenizer.eos_token_id, *tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])} - {None})
    suppress = LogitsProcessorList([SuppressTokensLogitsProcessor(eos, device="cpu")])
    backends = {merged: TransformersBackend(policy, tokenizer, SamplingSettings(temperature=0.7),
                                            merged_weights=merged, logits_processor=suppress)
                for merged in (False, True)}

    def run(merged: bool, tokens: int) -> float:
        start = time.perf_counter()
        backends[merged].generate(sequences, [tokens] * rows, ["</search>"])  # a stop string the rows never write
        return time.perf_counter() - start

    return run


def decoder_layers(policy):
    """The decoder's layers under the PEFT wrapper (``model.layers`` of a causal LM)."""
    return policy.get_base_model().model.layers


def compile_layers(layer_type, layers: int, run, backend: str):
    """``torch.compile`` of ``layer_type.forward`` (dynamic shapes) and the seconds of the first turn through it. Each
    layer's index is a constant of its graph, so the recompile limit is raised to a few graphs per layer."""
    import torch
    import torch._dynamo

    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 4 * layers)
    compiled = torch.compile(layer_type.forward, dynamic=True, backend=backend)
    eager, layer_type.forward = layer_type.forward, compiled
    start = time.perf_counter()
    try:
        run(True, 8)
    finally:
        layer_type.forward = eager
    return compiled, time.perf_counter() - start


def step_ms(run, merged: bool) -> float:
    run(merged, 4)
    short = run(merged, 8)
    return (run(merged, 72) - short) / 64 * 1000


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a warm-start adapter folder (rapo train's sft-warm-start)")
    parser.add_argument("--rows", type=int, nargs="+", default=[16], help="batch widths, each timed on its own")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="also torch.profiler's table of one merged turn")
    parser.add_argument("--compile", action="store_true", help="also the decoder layer compiled by torch.compile")
    parser.add_argument("--compile_backend", default="inductor",
                        help="torch.compile's backend for --compile (inductor generates C++ kernels on a CPU)")
    args = parser.parse_args(argv)

    import torch

    import rapo_trl.rollout.backends.kv_decode as kv_decode

    policy, tokenizer, dtype = load(args.model)
    inverse_cdf = kv_decode.sample_tokens
    layer_type = type(decoder_layers(policy)[0])
    eager_layer = layer_type.forward
    compiled_layer, compile_seconds = None, None

    def multinomial(probs):
        return torch.multinomial(probs, num_samples=1).squeeze(1)

    variants = {
        "sampler: torch.multinomial": (True, multinomial, False),
        "sampler: inverse CDF (the loop's)": (True, inverse_cdf, False),
        "weights: adapter": (False, inverse_cdf, False),
        "weights: merged": (True, inverse_cdf, False),
    }
    if args.compile:
        variants["compile: torch.compile of the decoder layer (merged)"] = (True, inverse_cdf, True)
    times: dict[int, dict[str, list[float]]] = {rows: {name: [] for name in variants} for rows in args.rows}
    try:
        for rows in args.rows:
            run = turn_runner(policy, tokenizer, rows)
            for _ in range(args.repeats):
                for name, (merged, sampler, compiled) in variants.items():
                    kv_decode.sample_tokens = sampler
                    if compiled and compiled_layer is None:
                        compiled_layer, compile_seconds = compile_layers(layer_type, len(decoder_layers(policy)), run,
                                                                        args.compile_backend)
                    layer_type.forward = compiled_layer if compiled else eager_layer
                    times[rows][name].append(step_ms(run, merged))
    finally:
        kv_decode.sample_tokens = inverse_cdf
        layer_type.forward = eager_layer
    profile = None
    if args.profile:
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as profiler

        run = turn_runner(policy, tokenizer, args.rows[0])
        run(True, 8)
        with profiler(activities=[ProfilerActivity.CPU]) as recorded:
            run(True, 40)
        profile = recorded.key_averages().table(sort_by="self_cpu_time_total", row_limit=20)
    record = {"machine": machine_info("peft"), "command": command_line(), "model": shown_path(args.model),
              "dtype": dtype, "rows": args.rows,
              "step_ms": {str(rows): {name: [round(t, 1) for t in values] for name, values in by_name.items()}
                          for rows, by_name in times.items()},
              "compile_backend": args.compile_backend if args.compile else None, "compile_seconds": compile_seconds,
              "profile": profile}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "decode_step.json").write_text(json.dumps(record, indent=1) + "\n")
    lines = [f"# Decode step of the KV-cache loop: {', '.join(map(str, args.rows))} rows, {dtype}", ""]
    lines += markdown_table(("rows", "variant", "ms a step (median)", "each round", "ms a row-step", "tok/s"),
                            [(rows, name, f"{statistics.median(values):.0f}", " ".join(f"{t:.0f}" for t in values),
                              f"{statistics.median(values) / rows:.2f}",
                              f"{rows / statistics.median(values) * 1000:.0f}")
                             for rows, by_name in times.items() for name, values in by_name.items()],
                            align="rlrrrr")
    if compile_seconds is not None:
        lines += ["", f"First compiled turn (compiling every decoder layer, backend {args.compile_backend}): "
                  f"{compile_seconds:.0f} s."]
    lines += ["", f"Machine: {machine_line(record['machine'])}; load average at the end "
              f"{record['machine']['load_avg']}.", "", f"Command: `{record['command']}`"]
    if profile:
        lines += ["", "One merged turn of 40 tokens, ops by self time:", "", "```", profile.rstrip(), "```"]
    (RESULTS / "decode_step.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
