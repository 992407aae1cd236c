"""What the LM head costs in the KV-cache loop's wide prefills, on ``rapo eval``'s greedy pass, side by side.

    .venv/bin/python benchmarks/bench_prefill_head.py --model runs/comparison/sft-warm-start --batch 64

A prefill after a tool result runs every row over its new tokens and keeps the last position's logits. Asked for
with ``logits_to_keep=1``, transformers slices a strided view of the hidden states, and ``F.linear`` over a strided
3-D input runs a batched matmul on a copy of the head's weight for every row; the loop asks with a 1-D index
(``kv_decode.last_position``), which gathers those rows into one contiguous block first. Both variants run the
same greedy pass (the recipe's first eval set, ``--questions`` questions at ``--batch`` rows, the recipe's budgets
and tools, the model loaded as ``rapo eval`` loads it), interleaved over ``--repeats`` rounds so a change in the
machine's load falls on both:

- ``gathered (the loop's)``: the head on the gathered last positions;
- ``strided view``: ``logits_to_keep=1``, the loop before it gathered them.

Per round: wall seconds, this process's CPU seconds (steadier on a shared machine), the seconds spent in prefill
forwards and their number; then the share of rows whose greedy completion equals the other variant's (bf16 products
summed in another order may flip a near-tie). Writes ``benchmarks/results/prefill_head.{json,md}`` with the machine.
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

GATHERED, STRIDED = "gathered (the loop's)", "strided view (logits_to_keep=1)"


def eval_pass(model_path: str, recipe: str, questions: int, batch: int):
    """A callable running the greedy pass once; returns ``(completions, prefill_seconds, prefill_forwards)``."""
    from rapo_trl.cli import parse_recipe
    from rapo_trl.cli.common import build_tools, eval_splits, load_policy, training_rows
    from rapo_trl.evaluation import _run
    from rapo_trl.rollout.agent import RolloutAgent
    from rapo_trl.rollout.backends import SamplingSettings
    from rapo_trl.rollout.backends.kv_decode import KVCacheDecoder
    from rapo_trl.rollout.engine import RolloutConfig

    script, rapo_args, _ = parse_recipe("eval", ["--config", recipe])[:3]
    tools = build_tools(script)
    rows = training_rows(script, eval_splits(script)[0], tools)
    prompts = list(rows["prompt"])[:questions]
    model, tokenizer = load_policy(model_path)
    config = RolloutConfig(max_completion_length=rapo_args.max_completion_length,
                           max_turn_tokens=rapo_args.max_turn_tokens)
    agent = RolloutAgent(model, tokenizer, tools, config, SamplingSettings(do_sample=False), batch)
    forward = KVCacheDecoder._forward
    prefill = [0.0, 0]

    def timed_forward(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return forward(self, *args, **kwargs)
        finally:
            prefill[0] += time.perf_counter() - start
            prefill[1] += 1

    def run() -> tuple[list[str], float, int]:
        prefill[0], prefill[1] = 0.0, 0
        KVCacheDecoder._forward = timed_forward
        try:
            rollouts = _run(agent, prompts, batch, False, "eval")
        finally:
            KVCacheDecoder._forward = forward
        return [tokenizer.decode(r.completion_ids, skip_special_tokens=True) for r in rollouts], prefill[0], prefill[1]

    return run


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a trained model or adapter folder, as rapo eval takes it")
    parser.add_argument("--recipe", default="configs/comparison_cpu.yaml")
    parser.add_argument("--questions", type=int, default=64)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)

    import torch

    import rapo_trl.rollout.backends.kv_decode as kv_decode

    gathered = kv_decode.last_position
    variants = {GATHERED: gathered, STRIDED: lambda width, device: 1}
    run = eval_pass(args.model, args.recipe, args.questions, args.batch)
    rounds: dict[str, list[dict]] = {name: [] for name in variants}
    texts: dict[str, list[str]] = {}
    try:
        for _ in range(args.repeats):
            for name, keep in variants.items():
                kv_decode.last_position = keep
                wall, cpu = time.perf_counter(), time.process_time()
                completions, prefill, forwards = run()
                rounds[name].append({"wall_s": round(time.perf_counter() - wall, 3),
                                     "cpu_s": round(time.process_time() - cpu, 3), "prefill_s": round(prefill, 3),
                                     "prefill_forwards": forwards})
                texts.setdefault(name, completions)
    finally:
        kv_decode.last_position = gathered
    same = sum(a == b for a, b in zip(texts[GATHERED], texts[STRIDED])) / len(texts[GATHERED])
    record = {"machine": machine_info("peft"), "command": command_line(), "model": shown_path(args.model),
              "recipe": args.recipe, "questions": args.questions, "batch": args.batch,
              "torch_threads": torch.get_num_threads(), "rounds": rounds, "identical_completions": round(same, 3)}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "prefill_head.json").write_text(json.dumps(record, indent=1) + "\n")

    def median(name: str, field: str) -> float:
        return statistics.median(r[field] for r in rounds[name])

    table = [(name, f"{median(name, 'wall_s'):.0f}", f"{median(name, 'cpu_s'):.0f}", f"{median(name, 'prefill_s'):.0f}",
              " ".join(f"{r['cpu_s']:.0f}" for r in rounds[name]),
              f"{median(STRIDED, 'cpu_s') / median(name, 'cpu_s'):.2f}")
             for name in variants]
    lines = [f"# The LM head in wide prefills: rapo eval's greedy pass, {args.questions} questions at {args.batch} rows",
             ""]
    lines += markdown_table(("variant", "wall s (median)", "CPU s (median)", "prefill s (median)", "CPU s each round",
                             "strided / this (CPU)"), table, align="lrrrrr")
    lines += ["", f"Greedy completions identical between the variants: {same:.3f} of the rows.", "",
              f"Model: `{record['model']}`; recipe `{args.recipe}`; torch threads {record['torch_threads']}.",
              f"Machine: {machine_line(record['machine'])}; load average at the end {record['machine']['load_avg']}.",
              "", f"Command: `{record['command']}`"]
    (RESULTS / "prefill_head.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
