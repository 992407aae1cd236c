"""``rapo eval``: pass@1 / F1 / EM with tools and without retrieval, trained and base model side by side."""

from __future__ import annotations

import json
from pathlib import Path

from rapo_trl.cli.common import UsageError, build_tools, resolve_model_path, training_rows, write_json

NUMERIC_TASKS = ("arithmetic", "gsm8k")


def _base_of(path: str) -> str | None:
    config = Path(path) / "adapter_config.json"
    if config.exists():
        return json.loads(config.read_text()).get("base_model_name_or_path")
    return None


def score(texts: list[str], answers: list, numeric: bool) -> dict:
    from rapo_trl.rewards import exact_match_reward, f1_reward, format_check, math_equivalence_reward

    completions = [[{"role": "assistant", "content": t}] for t in texts]
    f1 = f1_reward(completions=completions, answer=answers)
    em = exact_match_reward(completions=completions, answer=answers)
    passed = math_equivalence_reward(completions=completions, answer=answers) if numeric else em
    formatted = [float(format_check(t)[0]) for t in texts]
    n = max(len(texts), 1)
    return {"pass@1": sum(passed) / n, "f1": sum(f1) / n, "em": sum(em) / n, "format_ok": sum(formatted) / n}


def evaluate_model(path: str, rows, tools, rapo_args, batch_size: int, device: str | None = None) -> dict:
    from rapo_trl.rollout.agent import RolloutAgent

    agent = RolloutAgent.from_pretrained(
        path, tools, max_completion_length=rapo_args.max_completion_length,
        max_turn_tokens=rapo_args.max_turn_tokens, do_sample=False, batch_size=batch_size, device=device,
    )
    rollouts = agent.rollouts(list(rows["prompt"]))
    texts = [agent.tokenizer.decode(r.completion_ids, skip_special_tokens=True) for r in rollouts]
    result = score(texts, list(rows["answer"]), numeric=False)
    result["tool_calls"] = sum(r.tool_calls for r in rollouts) / max(len(rollouts), 1)
    return result, texts


def format_table(results: dict[str, dict], task: str) -> str:
    columns = ["pass@1", "f1", "em", "format_ok", "tool_calls"]
    lines = [f"| model ({task}) | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for name, metrics in results.items():
        lines.append(f"| {name} | " + " | ".join(f"{metrics[c]:.3f}" for c in columns) + " |")
    return "\n".join(lines)


def run(script, rapo_args, model_args) -> dict:
    target = script.eval_model or rapo_args.output_dir
    if not Path(target).is_dir():
        raise UsageError(f"eval model '{target}' does not exist; train first or set eval_model")
    rows = training_rows(script, "eval")
    tools = build_tools(script)
    models = {"trained": target}
    if script.eval_base:
        base = _base_of(target) or (model_args.model_name_or_path and resolve_model_path(model_args.model_name_or_path))
        if base:
            models = {"base": base, "trained": target}
    results, samples = {}, {}
    for name, path in models.items():
        metrics, texts = evaluate_model(path, rows, tools, rapo_args, script.eval_batch_size, script.device)
        if script.task in NUMERIC_TASKS:
            metrics["pass@1"] = score(texts, list(rows["answer"]), numeric=True)["pass@1"]
        results[name], samples[name] = metrics, texts[:3]
    print(format_table(results, script.task))
    write_json(Path(target) / "eval_results.json", {"task": script.task, "n": len(rows), "results": results,
                                                     "samples": samples})
    return results
