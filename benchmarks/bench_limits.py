"""What this machine allows each stage of an RL step: measured matmul rate and memory bandwidth, and from them the
limit of decode, prefill and the loss for a recipe's model and batch.

    .venv/bin/python benchmarks/bench_limits.py --recipe configs/demo_cpu.yaml

Measured here, on this machine: the matmul rate in fp32 and in bf16 (best of a few timed ``torch.mm`` calls, at a
square size and at the shape of the recipe's loss micro-batch against the MLP's up projection; on a CPU without
AVX512-BF16/AMX torch emulates bf16, which is why the precision rule, ``rapo_trl.hardware.default_precision``, picks
fp32 there), and the memory bandwidth (a tensor far larger than the caches summed, which reads it, and copied, which
reads and writes it; best of several repeats, the median beside it).

Inputs, not assumptions about the machine: the model's shapes (its config, built on the meta device: nothing loads
or downloads) and the recipe's batch: rows decoded together (``generation_batch_size``), rows of one question per
loss micro-batch (each runs its prompt once: ``rapo_trl.trainer.shared_prompt``), LoRA or not. Token counts:
the prompt is measured (the recipe's training rows through the model's chat template, mean); the completion is the
mean of the recipe's rollouts recorded by ``bench_step.py`` (``results/step.json``, the ``rapo`` arm) when there is
one, else half of ``max_completion_length``; ``--prompt-tokens`` / ``--completion-tokens`` set either.

Limits, each the binding one of a memory-bound and a compute-bound time (P: the model's matmul weights):

- decode, tok/s at the recipe's decode batch of R rows at mean context c (prompt + half the completion): a step reads
  every weight once plus R rows' KV cache, and computes R x (2 P + attention 4 L w c) FLOPs, at the matmul rates
  measured at R rows (the layers' shape and the LM head's apart: few-row matmuls run well below the square's rate).
- prefill, tok/s: R prompts of p tokens, 2 P + 2 L w p FLOPs a token (causal attention), weights read once.
- loss, s per row: a row's forward covers its completion plus its share of the prompt (p / rows sharing it), the
  LM head only the completion; backward with frozen base weights (LoRA) computes only the activations' gradients,
  so forward + backward is 2x the forward's matmul FLOPs (~4 P T; 3x, ~6 P T, when every weight trains), 3x for
  attention. LoRA's own matmuls (~5% of P at r16) are left out: the limit is a bound.

Writes ``benchmarks/results/limits.{json,md}`` (``--report-only`` redraws the .md, with ``limits_notes.md``, a
hand-written reading, after the table); ``bench_step.py`` reads the json to report each stage as a fraction of
its limit on the same machine (:func:`stage_limits`).
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
    with_notes,
)

use_offline_environment()
BYTES = {"fp32": 4, "bf16": 2}


# ------------------------------------------------------------------ measuring


def _timings(fn, repeats: int, budget_s: float) -> list[float]:
    """Seconds of ``repeats`` calls of ``fn`` after one warm-up, fewer (at least one) once ``budget_s`` is spent."""
    fn()
    times: list[float] = []
    spent = 0.0
    while len(times) < repeats and (not times or spent < budget_s):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
        spent += times[-1]
    return times


def measure_matmul(precision: str, m: int, k: int, n: int, repeats: int = 5, budget_s: float = 10.0) -> dict:
    """FLOP/s of an (m x k) @ (k x n) matmul in ``precision`` (``fp32`` or ``bf16``): best and median of the calls."""
    import torch

    dtype = torch.float32 if precision == "fp32" else torch.bfloat16
    a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    out = torch.empty(m, n, dtype=dtype)
    times = _timings(lambda: torch.mm(a, b, out=out), repeats, budget_s)
    flops = 2 * m * k * n
    return {"precision": precision, "shape": [m, k, n], "calls": len(times), "best_s": min(times),
            "flops_per_s": flops / min(times), "median_flops_per_s": flops / statistics.median(times)}


def measure_bandwidth(mib: int = 256, repeats: int = 5, budget_s: float = 10.0) -> dict:
    """Bytes/s of reading an fp32 tensor of ``mib`` MiB (a sum) and of copying it (read + write, counted as STREAM
    counts a copy: twice its size); best and median of the repeats."""
    import torch

    source = torch.ones(mib * 2**20 // 4, dtype=torch.float32)
    target = torch.empty_like(source)
    size = source.numel() * 4
    read = _timings(lambda: source.sum(), repeats, budget_s)
    copy = _timings(lambda: target.copy_(source), repeats, budget_s)
    return {"mib": mib, "repeats": len(read),
            "read_bytes_per_s": size / min(read), "median_read_bytes_per_s": size / statistics.median(read),
            "copy_bytes_per_s": 2 * size / min(copy), "median_copy_bytes_per_s": 2 * size / statistics.median(copy)}


# ------------------------------------------------------------------ the model's shapes


def model_shapes(config) -> dict:
    """Parameter counts and attention widths of a causal LM ``config``, from the model built on the meta device
    (no memory, nothing loaded): ``body_matmul_params`` (every linear layer but the LM head), ``head_params``,
    ``decode_read_params`` (what a decode step reads: all but an untied input embedding, of which it reads a row)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    head = model.get_output_embeddings()
    body = sum(sum(p.numel() for p in m.parameters(recurse=False))
               for m in model.modules() if isinstance(m, torch.nn.Linear) and m is not head)
    embedding = model.get_input_embeddings().weight
    tied = head.weight is embedding
    params = sum(p.numel() for p in model.parameters())
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return {"params": params, "body_matmul_params": body, "head_params": head.weight.numel(),
            "decode_read_params": params - (0 if tied else embedding.numel()), "tied_embeddings": tied,
            "layers": config.num_hidden_layers, "hidden": config.hidden_size,
            "intermediate": getattr(config, "intermediate_size", 4 * config.hidden_size),
            "attention_width": heads * head_dim,
            "kv_width": getattr(config, "num_key_value_heads", heads) * head_dim}


# ------------------------------------------------------------------ the limits


def _bound(tokens: float, memory_s: float, compute_s: float, **extra) -> dict:
    seconds = max(memory_s, compute_s)
    return {"tokens_per_s": tokens / seconds, "seconds": seconds, "bound": "memory" if memory_s >= compute_s else
            "compute", "memory_bound_tokens_per_s": tokens / memory_s, "compute_bound_tokens_per_s": tokens / compute_s,
            **extra}


def decode_limit(shapes: dict, rows: int, context: float, value_bytes: int, bandwidth: float, flops_per_s: float,
                 head_flops_per_s: float | None = None) -> dict:
    """tok/s of one decode step of ``rows`` rows at ``context`` tokens each: every weight and the rows' KV cache read
    once, 2 FLOPs per matmul weight and 4 L w c for attention per row. ``head_flops_per_s``: the LM head's own rate
    where it was measured apart (a vocabulary-wide matmul of few rows can run far below the layers' rate)."""
    weight_bytes = shapes["decode_read_params"] * value_bytes
    cache_bytes = rows * context * 2 * shapes["layers"] * shapes["kv_width"] * value_bytes
    body = rows * (2 * shapes["body_matmul_params"] + 4 * shapes["layers"] * shapes["attention_width"] * context)
    head = rows * 2 * shapes["head_params"]
    compute_s = body / flops_per_s + head / (head_flops_per_s or flops_per_s)
    return _bound(rows, (weight_bytes + cache_bytes) / bandwidth, compute_s,
                  bytes_per_step=weight_bytes + cache_bytes, flops_per_step=body + head)


def prefill_limit(shapes: dict, rows: int, prompt_tokens: float, value_bytes: int, bandwidth: float,
                  flops_per_s: float) -> dict:
    """tok/s of prefilling ``rows`` prompts of ``prompt_tokens`` in one call: weights read once and the KV cache
    written; 2 P + 2 L w p FLOPs a token (causal attention), the LM head on each row's last token."""
    tokens = rows * prompt_tokens
    moved = shapes["decode_read_params"] * value_bytes + tokens * 2 * shapes["layers"] * shapes["kv_width"] * value_bytes
    flops = (tokens * (2 * shapes["body_matmul_params"] + 2 * shapes["layers"] * shapes["attention_width"] * prompt_tokens)
             + rows * 2 * shapes["head_params"])
    return _bound(tokens, moved / bandwidth, flops / flops_per_s, flops=flops)


def loss_limit(shapes: dict, prompt_tokens: float, completion_tokens: float, rows_per_prompt: int, value_bytes: int,
               bandwidth: float, flops_per_s: float, frozen_weights: bool = True) -> dict:
    """Seconds per row of forward + backward, a micro-batch of ``rows_per_prompt`` rows running their prompt once.

    A row's share: ``completion + prompt / rows_per_prompt`` tokens through the body, the LM head on the completion.
    Backward: the activations' gradients (as many FLOPs as the forward), plus the weights' when they train
    (``frozen_weights`` False); attention's backward twice its forward. Memory: the weights read in the forward and
    the backward once per micro-batch."""
    p, c, layers, width = prompt_tokens, completion_tokens, shapes["layers"], shapes["attention_width"]
    row_tokens = c + p / rows_per_prompt
    matmul = 2 * shapes["body_matmul_params"] * row_tokens + 2 * shapes["head_params"] * c
    attention = 4 * layers * width * (c * (p + c / 2) + p * p / 2 / rows_per_prompt)
    flops = (2 if frozen_weights else 3) * matmul + 3 * attention
    moved = 2 * shapes["decode_read_params"] * value_bytes / rows_per_prompt
    limit = _bound(row_tokens, moved / bandwidth, flops / flops_per_s, flops_per_row=flops)
    limit["seconds_per_row"] = limit["seconds"]
    limit["row_tokens"] = row_tokens
    return limit


def stage_limits(limits: dict, precision: str, decode_rows: int | None = None, rows_per_prompt: int | None = None,
                 completion_tokens: float | None = None) -> dict:
    """Decode, prefill and loss limits from a ``limits.json`` record at ``precision``, for another batch than the
    recipe's (``bench_step.py``'s arms): the measured rates with the recorded shapes and prompt length."""
    inputs, shapes = limits["inputs"], limits["shapes"]
    rate = limits["matmul"][precision]["flops_per_s"]
    bandwidth = limits["bandwidth"]["read_bytes_per_s"]
    rows = decode_rows or inputs["decode_rows"]
    sharing = rows_per_prompt or inputs["rows_per_prompt"]
    p = inputs["prompt_tokens"]
    c = inputs["completion_tokens"] if completion_tokens is None else completion_tokens
    size = BYTES[precision]
    body_rate, head_rate = decode_rates(limits, precision, rows)
    return {"decode": decode_limit(shapes, rows, p + c / 2, size, bandwidth, body_rate or rate, head_rate),
            "prefill": prefill_limit(shapes, rows, p, size, bandwidth, rate),
            "loss": loss_limit(shapes, p, c, sharing, size, bandwidth, rate, inputs["frozen_weights"])}


def decode_rates(limits: dict, precision: str, rows: int) -> tuple[float | None, float | None]:
    """The layers' and the LM head's matmul rates measured at the decode row count nearest ``rows`` (``None, None``
    in a record measured before they were)."""
    measured = limits.get("decode_matmul", {}).get(precision)
    if not measured:
        return None, None
    nearest = min(measured, key=lambda r: (abs(int(r) - rows), int(r)))
    return measured[nearest]["body_flops_per_s"], measured[nearest]["head_flops_per_s"]


def measure_decode_matmuls(shapes: dict, rows_list, repeats: int) -> dict:
    """Per precision and row count, the matmul rate at a decode step's own shapes: the rows against the MLP's up
    projection (the layers) and against the vocabulary (the LM head)."""
    out: dict = {}
    for precision in BYTES:
        for rows in rows_list:
            body = measure_matmul(precision, rows, shapes["hidden"], shapes["intermediate"], repeats)
            head = measure_matmul(precision, rows, shapes["hidden"], shapes["head_params"] // shapes["hidden"], repeats)
            out.setdefault(precision, {})[str(rows)] = {"body_flops_per_s": body["flops_per_s"],
                                                        "head_flops_per_s": head["flops_per_s"]}
    return out


# ------------------------------------------------------------------ the recipe


def recipe_inputs(recipe: str, prompt_tokens: float | None, completion_tokens: float | None, step_json: Path) -> tuple:
    """The model's config and the recipe's batch and token counts, each with where it came from."""
    from transformers import AutoConfig, AutoTokenizer

    from rapo_trl.cli import parse_recipe
    from rapo_trl.cli.common import resolve_model_path, training_rows
    from rapo_trl.hardware import default_precision

    script, args, model_args = parse_recipe("train", ["--config", recipe])[:3]
    model_path = resolve_model_path(model_args.model_name_or_path)
    sources = {}
    if prompt_tokens is None:
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        rows = training_rows(script, "train")
        lengths = [len(tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=True,
                                                     return_dict=False)) for r in rows]
        prompt_tokens = sum(lengths) / len(lengths)
        sources["prompt_tokens"] = f"mean over the recipe's {len(lengths)} training prompts (chat template)"
    else:
        sources["prompt_tokens"] = "--prompt-tokens"
    if completion_tokens is None:
        recorded = json.loads(step_json.read_text()) if step_json.is_file() else {}
        run = recorded.get("runs", {}).get("rapo", {})
        if recorded.get("recipe") == recipe and run.get("rollouts_per_hour"):
            completion_tokens = run["completion_tokens_per_hour"] / run["rollouts_per_hour"]
            sources["completion_tokens"] = f"mean completion of the rapo arm's rollouts in {step_json.name}"
        else:
            completion_tokens = args.max_completion_length / 2
            sources["completion_tokens"] = "half of max_completion_length (no bench_step record of this recipe)"
    else:
        sources["completion_tokens"] = "--completion-tokens"
    sharing = min(args.per_device_train_batch_size, args.num_generations)  # RAPOTrainer runs a prompt once per micro-batch
    inputs = {"recipe": recipe, "model": shown_path(model_path), "decode_rows": args.generation_batch_size,
              "num_generations": args.num_generations, "per_device_train_batch_size": args.per_device_train_batch_size,
              "rows_per_prompt": sharing, "frozen_weights": bool(model_args.use_peft),
              "prompt_tokens": round(prompt_tokens, 1), "completion_tokens": round(completion_tokens, 1),
              "rule_precision": default_precision("cpu") if args.use_cpu else default_precision(),
              "sources": sources}
    return AutoConfig.from_pretrained(model_path), inputs


# ------------------------------------------------------------------ report


def report_lines(report: dict) -> list[str]:
    """The limits table: one row per stage and precision, the rule's precision marked."""
    rule, inputs = report["inputs"]["rule_precision"], report["inputs"]
    rows = []
    for precision, stages in report["limits"].items():
        mark = f"{precision} (rule)" if precision == rule else precision
        d, p, loss = stages["decode"], stages["prefill"], stages["loss"]
        rows += [
            [mark, f"decode, {inputs['decode_rows']} rows", f"{d['tokens_per_s']:.0f} tok/s ({d['seconds'] * 1e3:.1f} ms "
             "a step)", f"{d['memory_bound_tokens_per_s']:.0f}", f"{d['compute_bound_tokens_per_s']:.0f}", d["bound"]],
            [mark, f"prefill, {inputs['decode_rows']} x {inputs['prompt_tokens']:.0f} tokens",
             f"{p['tokens_per_s']:.0f} tok/s", f"{p['memory_bound_tokens_per_s']:.0f}",
             f"{p['compute_bound_tokens_per_s']:.0f}", p["bound"]],
            [mark, f"loss, {loss['row_tokens']:.0f} tokens a row", f"{loss['seconds_per_row']:.3f} s/row",
             f"{loss['memory_bound_tokens_per_s']:.0f}", f"{loss['compute_bound_tokens_per_s']:.0f}", loss["bound"]],
        ]
    return markdown_table(["precision", "stage", "limit", "memory-bound tok/s", "compute-bound tok/s", "binding"],
                          rows, "llrrrl")


def decode_rate_lines(report: dict) -> list[str]:
    """The matmul rates at decode shapes (few rows against a layer's and the vocabulary's width), when measured."""
    measured = report.get("decode_matmul")
    if not measured:
        return []
    rows = [[precision, n, f"{r['body_flops_per_s'] / 1e9:.1f}", f"{r['head_flops_per_s'] / 1e9:.1f}"]
            for precision, by_rows in measured.items() for n, r in sorted(by_rows.items(), key=lambda x: int(x[0]))]
    return ["Decode shapes (best GFLOP/s of `torch.mm`, rows x hidden against the MLP's width and the vocabulary):", "",
            *markdown_table(["precision", "rows", "layers GFLOP/s", "LM head GFLOP/s"], rows, "lrrr"), ""]


def markdown(report: dict) -> str:
    m, bw, inputs, s = report["matmul_runs"], report["bandwidth"], report["inputs"], report["shapes"]
    rates = markdown_table(["precision", "m x k x n", "calls", "best GFLOP/s", "median GFLOP/s"],
                           [[r["precision"], "x".join(map(str, r["shape"])), r["calls"],
                             f"{r['flops_per_s'] / 1e9:.1f}", f"{r['median_flops_per_s'] / 1e9:.1f}"] for r in m],
                           "llrrr")
    return "\n".join([
        f"# Limits of one RL step on this machine: {inputs['recipe']}", "",
        f"Machine: {machine_line(report['machine'])}; native bf16: {report['machine']['native_bf16']}; the precision "
        f"rule picks **{inputs['rule_precision']}**; load average at the start {report['machine']['load_avg']}.", "",
        "## Measured", "", *rates, "",
        f"Memory bandwidth ({bw['mib']} MiB fp32, best of {bw['repeats']}): read (sum) "
        f"**{bw['read_bytes_per_s'] / 1e9:.1f} GB/s** (median {bw['median_read_bytes_per_s'] / 1e9:.1f}), copy "
        f"{bw['copy_bytes_per_s'] / 1e9:.1f} GB/s (median {bw['median_copy_bytes_per_s'] / 1e9:.1f}). The limits use "
        "the read bandwidth; prefill and the loss each precision's best matmul rate, decode the rates below.", "",
        *decode_rate_lines(report),
        "## Limits", "", *report_lines(report), "",
        f"Model `{inputs['model']}`: {s['params'] / 1e6:.1f}M parameters ({s['body_matmul_params'] / 1e6:.1f}M in the "
        f"layers' matmuls, LM head {s['head_params'] / 1e6:.1f}M, tied: {s['tied_embeddings']}), {s['layers']} layers, "
        f"attention width {s['attention_width']}, KV width {s['kv_width']}. Batch: {inputs['decode_rows']} rows "
        f"decoded together; loss micro-batches of {inputs['per_device_train_batch_size']} rows, "
        f"{inputs['rows_per_prompt']} sharing one prompt forward; frozen base weights (LoRA): "
        f"{inputs['frozen_weights']}. Tokens: prompt {inputs['prompt_tokens']} "
        f"({inputs['sources']['prompt_tokens']}), completion {inputs['completion_tokens']} "
        f"({inputs['sources']['completion_tokens']}); decode at the mean context, prompt + half the completion.", "",
        f"Command: `{report['command']}`", ""])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default="configs/demo_cpu.yaml")
    parser.add_argument("--prompt-tokens", type=float, help="default: measured on the recipe's training prompts")
    parser.add_argument("--completion-tokens", type=float,
                        help="default: the mean of the recipe's rollouts in results/step.json, else half the budget")
    parser.add_argument("--square", type=int, default=1024, help="side of the square matmul timed")
    parser.add_argument("--mib", type=int, default=256, help="size of the tensor the bandwidth is timed on")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--results", default=str(RESULTS / "limits"), help="path stem of the .json/.md results")
    parser.add_argument("--report-only", action="store_true", help="rewrite the .md from the .json")
    args = parser.parse_args(argv)
    stem = Path(args.results)
    if args.report_only:
        write_markdown(json.loads(stem.with_suffix(".json").read_text()), stem)
        return

    config, inputs = recipe_inputs(args.recipe, args.prompt_tokens, args.completion_tokens, RESULTS / "step.json")
    shapes = model_shapes(config)
    machine = machine_info()
    micro_tokens = round(inputs["per_device_train_batch_size"] * (inputs["completion_tokens"] + inputs["prompt_tokens"]
                                                                   / inputs["rows_per_prompt"]))
    runs = [measure_matmul(precision, m, k, n, args.repeats)
            for precision in ("fp32", "bf16")
            for m, k, n in ((args.square,) * 3, (micro_tokens, shapes["hidden"], shapes["intermediate"]))]
    decode_rows = sorted({8, 16, 32, 64, inputs["decode_rows"]})
    decode_matmul = measure_decode_matmuls(shapes, decode_rows, args.repeats)
    bandwidth = measure_bandwidth(args.mib, args.repeats)
    best = {precision: max((r for r in runs if r["precision"] == precision), key=lambda r: r["flops_per_s"])
            for precision in ("fp32", "bf16")}
    report = {"recipe": args.recipe, "machine": machine, "command": command_line(), "inputs": inputs,
              "shapes": shapes, "matmul_runs": runs, "matmul": best, "decode_matmul": decode_matmul,
              "bandwidth": bandwidth}
    report["limits"] = {precision: stage_limits(report, precision) for precision in ("fp32", "bf16")}
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    write_markdown(report, stem)


def write_markdown(report: dict, stem: Path) -> None:
    text = with_notes(markdown(report), stem.parent / f"{stem.name}_notes.md")  # a hand-written reading, if any
    stem.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
