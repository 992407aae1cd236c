"""The rollout engine's KV-cached sampling loop against plain ``model.generate``.

SmolLM2 rollouts of RAPO's ``HybridRolloutEngine`` (``kv_decode.py``: the cache is kept across turns) on
arithmetic eval prompts, against, on the same rows and from the same seed:

  generate, same per-row counts   one ``model.generate`` call, row i sampling exactly as many tokens as the
                                  engine's row i sampled (EOS suppressed; finished rows pad along, as in generate)
  generate, equal counts (mean)   every row samples the engine's mean count: plain generate at its best
  engine (generate per turn)      the engine with ``TransformersBackend(reuse_kv=False)``: one left-padded
                                  ``generate`` call per turn, the path before the cache

Variant ``scripted`` is tool-heavy: a logits processor reads each row's own ids (so it works while rows leave
the batch) and, in every turn of a row with fewer than ``--calls`` calls, lets it sample ``--free-tokens``
tokens, then forces a ``<python>`` call; ``natural`` samples freely. Each round runs the KV engine first, then
the others in alternating order. Appends an invocation to ``results/rollout.json`` (``engine_vs_generate``)
and redraws its block of ``results/rollout.md``; the rest of that file is left as it is.

    nice -n 5 .venv/bin/python benchmarks/bench_engine_vs_generate.py --system-prompt full --rows 4

(``bench_rollout.py --engine-vs-generate`` and the ``--ev-*`` flags of that command still run this.)
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # common.py and rollout_runs.py, however this is loaded
from common import (  # noqa: E402
    RESULTS,
    command_line,
    machine_info,
    machine_line,
    markdown_table,
    splice_block,
    update_results,
    use_offline_environment,
)
from rollout_runs import (  # noqa: E402
    RAPO_CALL,
    RunResult,
    add_shared_flags,
    end_token_ids,
    paired_ratio,
    summarize,
    system_prompt,
)

use_offline_environment()  # before torch and transformers are imported

import torch  # noqa: E402
from transformers import LogitsProcessor, StoppingCriteria  # noqa: E402

BLOCK = "engine-vs-generate"
KV_ENGINE = "engine (KV cache)"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_shared_flags(parser)
    # The --ev-* spellings keep recorded command lines (benchmarks/results) runnable.
    parser.add_argument("--rows", "--ev-rows", type=int, nargs="+", default=[4, 16], help="rows per batch")
    parser.add_argument("--max-len", "--ev-max-len", type=int, default=256, help="max_completion_length")
    parser.add_argument("--turn-tokens", "--ev-turn-tokens", type=int, default=160, help="max_turn_tokens")
    parser.add_argument("--repeats", "--ev-repeats", type=int, default=2, help="timed rounds")
    parser.add_argument("--warmup", "--ev-warmup", action="store_true", help="one untimed round first")
    parser.add_argument("--device", "--ev-device", default="cpu", help="where the model runs: cpu, cuda")
    parser.add_argument("--dtype", "--ev-dtype", default="fp32", choices=["fp32", "bf16"], help="weights")
    parser.add_argument("--out", type=Path, default=RESULTS / "rollout.md",
                        help="markdown report (its engine-vs-generate block); the JSON beside it")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=FutureWarning)
    logging.getLogger("transformers").setLevel(logging.ERROR)
    started, info = time.perf_counter(), machine_info()
    load_at_start = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    model, tokenizer = load_smollm2(args.device, args.dtype)
    records = [record for n_rows in args.rows for variant in args.variants
               for record in measure(args, model, tokenizer, n_rows, variant)]
    invocation = {"machine": info, "settings": settings(args, torch.get_num_threads()),
                  "load_average_at_start": load_at_start, "command": command_line(),
                  "seconds": round(time.perf_counter() - started)}
    section = save(args.out.with_suffix(".json"), invocation, records)
    block = render(section)
    print("\n" + block)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(splice_block(args.out.read_text() if args.out.exists() else "", block, BLOCK))
    print(f"written to {args.out} and {args.out.with_suffix('.json')}")
    return 0


def load_smollm2(device: str, dtype: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rapo_trl.models import smollm2_path

    path = smollm2_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    weights = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    return AutoModelForCausalLM.from_pretrained(path, dtype=weights).to(device), tokenizer


def settings(args, threads: int) -> str:
    return (f"SmolLM2-135M-Instruct ({args.dtype} on {args.device}), arithmetic eval prompts with the "
            f"{args.system_prompt} system prompt, G={args.generations} rows per prompt, max_completion_length "
            f"{args.max_len}, max_turn_tokens {args.turn_tokens}, temperature 1.0, PythonTool (real sandbox), no "
            f"retrieval; torch threads {threads}. Scripted variant: {args.calls} forced `<python>` call(s) per row "
            f"after {args.free_tokens} sampled tokens each, then free sampling to EOS or the budget.")


# ------------------------------------------------------------------ one batch size and variant


def measure(args, model, tokenizer, n_rows: int, variant: str) -> list[dict]:
    """Every path on ``n_rows`` rows of ``variant``: timed rounds, then one record per path."""
    from rapo_trl.rollout.agent import render_prompt
    from rapo_trl.tasks import load_task, to_rapo_rows
    from rapo_trl.tools import PythonTool

    data = to_rapo_rows(load_task("arithmetic", "eval", n=max(1, n_rows // args.generations)),
                        system_prompt=system_prompt(args.system_prompt))
    prompts = [render_prompt(tokenizer, row["prompt"]) for row in data for _ in range(args.generations)]
    banned = end_token_ids(tokenizer, model)
    engines = make_engines(args, model, tokenizer, banned, scripted=variant == "scripted")
    # Short untimed warm-up of every path (first-call costs: kernels, stop-string tables, the sandbox).
    short = [prompts[0], prompts[-1]]
    plain_generate(model, tokenizer, short, [4, 4], banned)
    for engine in engines.values():
        engine.backend.generate(short, [4, 4], engine.stop_strings)
        PythonTool().run("print(1)")
    runs = timed_rounds(args, model, tokenizer, engines, prompts, banned, f"{len(prompts)} rows / {variant}")
    return [record(len(prompts), variant, name, path_runs, runs[KV_ENGINE]) for name, path_runs in runs.items()]


def make_engines(args, model, tokenizer, banned: list[int], scripted: bool) -> dict:
    from rapo_trl.rollout import HybridRolloutEngine, RolloutConfig, TransformersBackend
    from rapo_trl.tools import PythonTool

    call_ids = tokenizer(RAPO_CALL, add_special_tokens=False)["input_ids"]
    boundaries = [tokenizer("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"],
                  tokenizer("</result>\n", add_special_tokens=False)["input_ids"]]
    extra = [ScriptedCallsByContent(call_ids, boundaries, args.calls, args.free_tokens, banned)] if scripted else []
    config = RolloutConfig(max_completion_length=args.max_len, max_turn_tokens=args.turn_tokens, retrieve_prob=0.0)
    return {
        name: HybridRolloutEngine(
            tokenizer, TransformersBackend(model, tokenizer, reuse_kv=reuse, logits_processor=extra), [PythonTool()],
            None, config, seed=args.seed)
        for name, reuse in ((KV_ENGINE, True), ("engine (generate per turn)", False))
    }


def timed_rounds(args, model, tokenizer, engines, prompts, banned, label: str) -> dict[str, list[RunResult]]:
    """The KV engine first in every round (its per-row counts set the generate paths'), then the other paths in
    alternating order, each from the round's seed."""
    runs: dict[str, list[RunResult]] = {}
    for rep in range(-1 if args.warmup else 0, args.repeats):
        seed = args.seed + 1000 * (rep + 1)
        torch.manual_seed(seed)
        results = {}
        results[KV_ENGINE], counts = run_engine(engines[KV_ENGINE], prompts)
        mean = -(-sum(counts) // len(counts))
        others = {  # name: (function, arguments)
            "generate, same per-row counts": (plain_generate, (model, tokenizer, prompts, counts, banned)),
            "generate, equal counts (mean)": (plain_generate, (model, tokenizer, prompts, [mean] * len(counts), banned)),
            "engine (generate per turn)": (run_engine, (engines["engine (generate per turn)"], prompts)),
        }
        for name in (list(others) if rep % 2 == 0 else list(others)[::-1]):
            torch.manual_seed(seed)
            function, arguments = others[name]
            result = function(*arguments)
            results[name] = result[0] if isinstance(result, tuple) else result
        tag = "warm-up" if rep < 0 else f"run {rep + 1}"
        print(f"  [{label}] {tag}: " + "; ".join(
            f"{k}: {r.seconds:.1f}s {r.policy_tokens} tok ({r.policy_tokens / r.seconds:.1f} tok/s)"
            for k, r in results.items()), flush=True)
        if rep >= 0:
            for name, result in results.items():
                runs.setdefault(name, []).append(result)
    return runs


def record(rows: int, variant: str, name: str, runs: list[RunResult], kv_runs: list[RunResult]) -> dict:
    s = summarize(runs)
    baseline = name == KV_ENGINE
    return {
        "rows": rows, "variant": variant, "path": name, "rounds": len(runs),
        "prompt_tokens": s["prompt_tokens"], "policy_tokens": s["policy_tokens"],
        "forced_tokens": s["forced_tokens"], "tool_calls": s["tool_calls"], "s_median": s["s_median"],
        "policy_tok_s": s["tok_s"],
        "policy_tok_s_generate_time": statistics.median(r.policy_tokens / r.generate_s for r in runs),
        "policy_tok_per_cpu_s": statistics.median(r.policy_tokens / r.cpu_s for r in runs),
        "kv_engine_over_this": None if baseline else paired_ratio(kv_runs, runs, rows=False),
        "kv_engine_over_this_cpu": None if baseline else statistics.median(
            (b.policy_tokens / b.cpu_s) / (a.policy_tokens / a.cpu_s) for b, a in zip(kv_runs, runs)),
        "runs": [vars(r) for r in runs],
    }


# ------------------------------------------------------------------ the paths


class ScriptedCallsByContent(LogitsProcessor):
    """Tool-heavy policy for any batch layout: each row is read from its own ids, not its batch index.

    A row with fewer than ``calls`` complete forced calls samples ``free`` tokens of the current turn (EOS
    banned), then is forced through ``call_ids``; the turn starts after the last of ``boundaries`` (the
    prompt's assistant header, a tool result's closing tag). Works whether rows keep their place in the
    batch (``generate``) or leave it as they stop (the KV-cached loop).
    """

    def __init__(self, call_ids: list[int], boundaries: list[list[int]], calls: int, free: int, banned: list[int]):
        self.call = torch.tensor(call_ids)
        self.boundaries = [torch.tensor(b) for b in boundaries]
        self.calls, self.free, self.banned = calls, free, banned

    @staticmethod
    def _ends(ids: torch.Tensor, pattern: torch.Tensor) -> torch.Tensor:
        """Positions just after each occurrence of ``pattern`` in ``ids``."""
        if len(ids) < len(pattern):
            return ids.new_zeros(0)
        hits = (ids.unfold(0, len(pattern), 1) == pattern.to(ids.device)).all(-1).nonzero().squeeze(1)
        return hits + len(pattern)

    def __call__(self, input_ids, scores):
        for row in range(input_ids.shape[0]):
            ids = input_ids[row]
            if len(self._ends(ids, self.call)) >= self.calls:
                continue
            start = max(int(e[-1]) if len(e) else 0 for e in (self._ends(ids, b) for b in self.boundaries))
            step = len(ids) - start
            if step < self.free:
                scores[row, self.banned] = -float("inf")
            elif step - self.free < len(self.call):
                token = int(self.call[step - self.free])
                scores[row, :] = -float("inf")
                scores[row, token] = 0.0
        return scores


def plain_generate(model, tokenizer, prompts: list[list[int]], counts: list[int], banned: list[int]) -> RunResult:
    """``model.generate`` on the same rows, row ``i`` sampling exactly ``counts[i]`` tokens (EOS suppressed;
    rows that reach their count pad along until the longest is done, as generate does)."""
    from transformers import GenerationConfig, StoppingCriteriaList

    width = max(len(p) for p in prompts)
    pad = tokenizer.pad_token_id
    input_ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros_like(input_ids)
    for r, p in enumerate(prompts):
        input_ids[r, width - len(p):] = torch.tensor(p)
        mask[r, width - len(p):] = 1
    config = GenerationConfig(max_new_tokens=max(counts), do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                              pad_token_id=pad, eos_token_id=banned[0], suppress_tokens=banned)
    model.eval()
    input_ids, mask = input_ids.to(model.device), mask.to(model.device)
    start, cpu = time.perf_counter(), time.process_time()
    with torch.no_grad():
        out = model.generate(input_ids=input_ids, attention_mask=mask, generation_config=config,
                             stopping_criteria=StoppingCriteriaList([RowLengths(width, counts)]))
    if out.is_cuda:
        torch.cuda.synchronize()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    assert out.shape[1] - width == max(counts)
    return RunResult(seconds, len(prompts), sum(counts), 0, statistics.mean(len(p) for p in prompts), 0,
                     generate_s=seconds, cpu_s=cpu)


class RowLengths(StoppingCriteria):
    """Stops row ``i`` of a ``generate`` call once it has sampled ``counts[i]`` tokens."""

    def __init__(self, start: int, counts: list[int]):
        self.start, self.counts = start, torch.tensor(counts)

    def __call__(self, input_ids, scores, **kwargs):
        return (input_ids.shape[1] - self.start) >= self.counts.to(input_ids.device)


def run_engine(engine, prompts: list[list[int]]) -> tuple[RunResult, list[int]]:
    start, cpu = time.perf_counter(), time.process_time()
    rollout = engine.roll_out(prompts)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    rows, stats = rollout.rows, rollout.stats
    policy = [sum(r.env_mask) for r in rows]
    total = sum(len(r.completion_ids) for r in rows)
    result = RunResult(seconds, len(rows), sum(policy), total - sum(policy),
                       statistics.mean(len(p) for p in prompts), sum(r.tool_calls for r in rows), 0,
                       stats.generate_seconds, stats.tool_seconds, stats.retrieval_seconds, cpu_s=cpu)
    return result, policy


# ------------------------------------------------------------------ results


def save(path: Path, invocation: dict, records: list[dict]) -> dict:
    """Add this invocation to the JSON results; its records replace earlier ones of the same rows and variant."""
    def change(data: dict) -> None:
        section = data.setdefault(
            "engine_vs_generate", {"model": "SmolLM2-135M-Instruct", "invocations": [], "records": []})
        section["invocations"].append(invocation)
        replaced = {(r["rows"], r["variant"]) for r in records}
        for r in records:
            r["invocation"] = len(section["invocations"])
        section["records"] = [r for r in section["records"] if (r["rows"], r["variant"]) not in replaced] + records

    return update_results(path, change)["engine_vs_generate"]


LEGEND = (
    "Each round runs the KV-cached engine first (seeded), then the other paths in alternating order, each "
    "from the same seed. *generate, same per-row counts*: one `model.generate` call on the same rows, "
    "row i sampling exactly as many tokens as the engine's row i sampled (EOS suppressed; finished rows "
    "pad along until the longest is done, as generate does). *generate, equal counts*: every row samples "
    "the engine's mean count rounded up (no ragged ends: plain generate at its best). *engine (generate "
    "per turn)*: the same engine with `TransformersBackend(reuse_kv=False)`, one left-padded `generate` "
    "call per turn (the path before this change). Policy tokens are the engine's mask-1 tokens (forced "
    "calls count, tool results do not). Wall tok/s includes the engine's tool time. *CPU s*: this "
    "process's CPU time (torch runs one thread; sandboxed tool subprocesses are not counted, they are "
    "~1 % of the engine's wall time), far steadier than wall time on a shared, oversubscribed machine. "
    "Ratio columns: median over rounds of the within-round ratio of rates (> 1: the KV engine is faster)."
)


def render(section: dict) -> str:
    order = {"scripted": 0, "natural": 1}
    records = sorted(section["records"], key=lambda r: (r["rows"], order.get(r["variant"], 2)))
    head = ["rows / variant", "path", "rounds", "prompt tok", "policy tok/run", "forced tok/run", "tool calls/run",
            "s/run", "policy tok/s (wall)", "policy tok per CPU s", "KV engine / this (wall)",
            "KV engine / this (CPU)", "run"]
    rows = [[f"{r['rows']} rows / {r['variant']}", r["path"], r["rounds"], f"{r['prompt_tokens']:.0f}",
             f"{r['policy_tokens']:.0f}", f"{r['forced_tokens']:.0f}", f"{r['tool_calls']:.1f}",
             f"{r['s_median']:.1f}", f"{r['policy_tok_s']:.1f}", f"{r['policy_tok_per_cpu_s']:.1f}",
             "" if r["kv_engine_over_this"] is None else f"{r['kv_engine_over_this']:.2f}",
             "" if r["kv_engine_over_this_cpu"] is None else f"**{r['kv_engine_over_this_cpu']:.2f}**",
             r["invocation"]] for r in records]
    runs = []
    for i in sorted({r["invocation"] for r in records}):
        inv = section["invocations"][i - 1]
        runs.append(f"{i}. `{inv['command']}` ({inv['seconds']} s; {inv['machine']['date']}; load average at start "
                    f"{inv['load_average_at_start']}). {machine_line(inv['machine'])}. {inv['settings']}")
    return "\n".join(["## The engine against plain `generate`", "", *markdown_table(head, rows),
                      "", LEGEND, "", "Runs:", "", *runs])


if __name__ == "__main__":
    sys.exit(main())
