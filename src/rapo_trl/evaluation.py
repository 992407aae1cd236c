"""Held-out evaluation with tools and without retrieval: pass@1 with a 95% interval, batched, with progress."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

NUMERIC_TASKS = ("arithmetic", "word_problems", "gsm8k")


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a pass rate (sound at 0/n and n/n, unlike the normal approximation)."""
    if n <= 0:
        return 0.0, 0.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def score_texts(texts: Sequence[str], answers: Sequence, numeric: bool) -> dict:
    """pass@1 (math equivalence for numeric tasks, else exact match), its interval, F1, EM and format rate."""
    from rapo_trl.rewards import exact_match_reward, f1_reward, format_check, math_equivalence_reward

    completions = [[{"role": "assistant", "content": t}] for t in texts]
    answers = list(answers)
    em = exact_match_reward(completions=completions, answer=answers)
    passed = math_equivalence_reward(completions=completions, answer=answers) if numeric else em
    correct = int(sum(1 for p in passed if p >= 1.0))
    n = len(texts)
    lo, hi = wilson_interval(correct, n)
    return {
        "pass@1": correct / max(n, 1),
        "pass@1_ci95": [round(lo, 4), round(hi, 4)],
        "correct": correct,
        "n": n,
        "f1": sum(f1_reward(completions=completions, answer=answers)) / max(n, 1),
        "em": sum(em) / max(n, 1),
        "format_ok": sum(float(format_check(t)[0]) for t in texts) / max(n, 1),
    }


def evaluate_policy(model, tokenizer, rows, tools, *, max_completion_length: int, max_turn_tokens: int,
                    numeric: bool = True, batch_size: int = 32, progress: bool = True, desc: str = "eval") -> dict:
    """Greedy rollouts of ``model`` (a loaded model, PEFT or not, in training or not) over ``rows``.

    ``rows`` has ``prompt`` and ``answer`` columns. Returns the scores of `score_texts` plus tool calls and
    truncation per rollout, wall seconds and the completions (``texts``).
    """
    from tqdm.auto import tqdm

    from rapo_trl.rollout.agent import RolloutAgent, render_prompt
    from rapo_trl.rollout.backends import SamplingSettings
    from rapo_trl.rollout.engine import RolloutConfig

    agent = RolloutAgent(model, tokenizer, tools,
                         RolloutConfig(max_completion_length=max_completion_length, max_turn_tokens=max_turn_tokens),
                         SamplingSettings(do_sample=False), batch_size)
    prompts = list(rows["prompt"])
    start = time.perf_counter()
    rollouts = []
    with tqdm(total=len(prompts), desc=desc, unit="q", disable=not progress) as bar:
        for first in range(0, len(prompts), batch_size):
            batch = prompts[first : first + batch_size]
            rollouts += agent.engine.run([render_prompt(tokenizer, p) for p in batch], retrieval_enabled=False)
            bar.update(len(batch))
    texts = [tokenizer.decode(r.completion_ids, skip_special_tokens=True) for r in rollouts]
    result = score_texts(texts, rows["answer"], numeric)
    n = max(len(rollouts), 1)
    result["tool_calls"] = sum(r.tool_calls for r in rollouts) / n
    result["truncated"] = sum(r.truncated for r in rollouts) / n
    result["seconds"] = round(time.perf_counter() - start, 1)
    result["texts"] = texts
    return result


def format_table(results: dict[str, dict], title: str) -> str:
    """A markdown table: one row per model, pass@1 with its interval first."""
    columns = ["f1", "em", "format_ok", "tool_calls"]
    lines = [f"| model ({title}) | pass@1 | 95% CI | " + " | ".join(columns) + " |",
             "|---" * (len(columns) + 3) + "|"]
    for name, m in results.items():
        lo, hi = m.get("pass@1_ci95", (float("nan"), float("nan")))
        cells = " | ".join(f"{m[c]:.3f}" if c in m else "-" for c in columns)
        lines.append(f"| {name} | {m['pass@1']:.3f} ({m.get('correct', '?')}/{m.get('n', '?')}) | "
                     f"{lo:.3f}-{hi:.3f} | {cells} |")
    return "\n".join(lines)
