"""What the two rollout benchmarks share (``bench_rollout.py``: the engine against TRL's tool loop;
``bench_engine_vs_generate.py``: the engine against plain ``generate``): the scripted tool call, the system
prompt, one timed run's counts, and the medians and paired ratios their tables report."""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass

CALL_CODE = "print(sum(i * i for i in range(1000)))  # bench-call"
CALL_MARKER = "# bench-call"
RAPO_CALL = f"<python>\n{CALL_CODE}\n</python>"
# The shipped RAPO system prompt is ~370 SmolLM2 tokens; re-prefilled every turn it dominates a CPU rollout.
# ``--system-prompt short`` (default) keeps the same instructions in ~60 tokens.
SHORT_SYSTEM_PROMPT = (
    "Solve the problem step by step. To run Python, write code between <python> and </python>; its output "
    "comes back between <result> and </result>. Finish with <answer>\\boxed{...}</answer>."
)


def add_shared_flags(parser: argparse.ArgumentParser) -> None:
    """The flags both rollout benchmarks take, with the same meaning."""
    parser.add_argument("--variants", nargs="+", default=["natural", "scripted"], choices=["natural", "scripted"])
    parser.add_argument("--system-prompt", choices=["short", "full"], default="short",
                        help="short: a ~60-token tag instruction; full: the shipped RAPO system prompt")
    parser.add_argument("--generations", type=int, default=4, help="rows per prompt (G)")
    parser.add_argument("--calls", type=int, default=2, help="scripted tool calls per row")
    parser.add_argument("--free-tokens", type=int, default=8, help="sampled tokens before each scripted call")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads (1: on a shared, oversubscribed machine OpenMP barriers make 2 "
                             "threads 10-25x slower than 1; 0: leave torch's default)")


def system_prompt(choice: str) -> str:
    from rapo_trl.tasks import SYSTEM_PROMPT

    return SHORT_SYSTEM_PROMPT if choice == "short" else SYSTEM_PROMPT


def end_token_ids(tokenizer, model) -> list[int]:
    """Every id that ends a row (the tokenizer's EOS and the model's), for banning while a call is scripted."""
    ends = model.generation_config.eos_token_id
    ends = list(ends) if isinstance(ends, list | tuple) else [ends]
    return sorted({tokenizer.eos_token_id, *ends} - {None})


@dataclass
class RunResult:
    seconds: float
    rows: int
    policy_tokens: int
    forced_tokens: int
    prompt_tokens: float
    tool_calls: int
    retrievals: int = 0
    generate_s: float = 0.0
    tool_s: float = 0.0
    retrieval_s: float = 0.0
    cpu_s: float = 0.0  # CPU time of this process (not of tool subprocesses); steadier than wall time under load


def summarize(runs: list[RunResult]) -> dict:
    """Medians over the timed runs (robust to a run hit by the shared machine); shares are time-weighted."""
    seconds = sum(r.seconds for r in runs)
    return {
        "s_median": statistics.median(r.seconds for r in runs),
        "s_min": min(r.seconds for r in runs),
        "s_max": max(r.seconds for r in runs),
        "rows": runs[0].rows,
        "prompt_tokens": statistics.mean(r.prompt_tokens for r in runs),
        "policy_tokens": statistics.mean(r.policy_tokens for r in runs),
        "forced_tokens": statistics.mean(r.forced_tokens for r in runs),
        "tool_calls": statistics.mean(r.tool_calls for r in runs),
        "retrievals": statistics.mean(r.retrievals for r in runs),
        "tok_s": statistics.median(r.policy_tokens / r.seconds for r in runs),
        "rows_s": statistics.median(r.rows / r.seconds for r in runs),
        "gen_share": sum(r.generate_s for r in runs) / seconds,
        "tool_share": sum(r.tool_s for r in runs) / seconds,
        "retrieval_share": sum(r.retrieval_s for r in runs) / seconds,
    }


def paired_ratio(b_runs: list[RunResult], a_runs: list[RunResult], rows: bool) -> float:
    """Median over rounds of B's rate / A's rate in the same round (same seed, adjacent in time)."""
    def rate(r):
        return (r.rows if rows else r.policy_tokens) / r.seconds

    return statistics.median(rate(b) / rate(a) for b, a in zip(b_runs, a_runs))
