"""Held-out evaluation with tools and without retrieval: pass@1 with a 95% interval, batched, with progress."""

from __future__ import annotations

import contextlib
import json
import math
import time
import warnings
from collections.abc import Sequence

NUMERIC_TASKS = ("arithmetic", "word_problems", "gsm8k")

SCORINGS = ("auto", "math", "exact")
"""How pass@1 compares an answer with its gold: ``math`` (math-verify equivalence), ``exact`` (exact match after
SQuAD normalisation), or ``auto`` (``set_scoring``)."""


def set_scoring(scoring: str, task: str, answers: Sequence) -> str:
    """``"math"`` or ``"exact"`` for an eval set: ``scoring`` unless it is ``"auto"``, which takes math for the shipped
    numeric tasks and for a set whose every gold is a number (``0.5`` then passes for ``1/2``), exact otherwise."""
    from rapo_trl.rewards.scoring import gold_list, is_number

    if scoring not in SCORINGS:
        raise ValueError(f"eval scoring must be one of {SCORINGS}, got {scoring!r}")
    if scoring != "auto":
        return scoring
    if task in NUMERIC_TASKS:
        return "math"
    golds = [gold_list(answer) for answer in answers]
    return "math" if golds and all(g and all(is_number(one) for one in g) for g in golds) else "exact"


def wilson_interval(successes: float, n: float, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a pass rate (sound at 0/n and n/n, unlike the normal approximation); the counts
    may be effective ones, not whole (``mean_at_k``)."""
    # Hand-written: statsmodels' proportion_confint has it, but neither statsmodels nor scipy is a dependency.
    if n <= 0:
        return 0.0, 0.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def passes(texts: Sequence[str], answers: Sequence, numeric: bool) -> list[bool]:
    """Per text: correct (math equivalence for numeric tasks, else exact match of the boxed answer)."""
    from rapo_trl.rewards import exact_match_reward, math_equivalence_reward

    completions = [[{"role": "assistant", "content": t}] for t in texts]
    scores = (math_equivalence_reward if numeric else exact_match_reward)(completions=completions, answer=list(answers))
    return [p >= 1.0 for p in scores]


def score_texts(texts: Sequence[str], answers: Sequence, numeric: bool) -> dict:
    """pass@1 (math equivalence for numeric tasks, else exact match), its interval, F1, EM and format rate, and
    ``correct_by_question``: 1 or 0 per text, in order, so that two models' scores pair question by question."""
    from rapo_trl.rewards import exact_match_reward, f1_reward, format_check

    completions = [[{"role": "assistant", "content": t}] for t in texts]
    answers = list(answers)
    em = exact_match_reward(completions=completions, answer=answers)
    by_question = [int(p) for p in passes(texts, answers, numeric)]
    correct = sum(by_question)
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
        "correct_by_question": by_question,
    }


def mean_at_k(passed: Sequence[bool], k: int) -> dict:
    """mean@k: pass averaged over ``k`` samples of each question (``passed`` holds each question's k in a row),
    with a 95% interval that counts questions, not samples, as the independent units.

    The k samples of one question are correlated (an easy question passes in all of them), so the interval is
    Wilson's over an effective sample size ``n k / deff``, with the design effect ``deff = k Var(p_q) / (p (1 - p))``
    estimated from the per-question pass rates ``p_q`` and kept in [1, k] (k where p is 0 or 1: no spread to
    estimate from, so as wide as n independent questions). Hand-written: no installed library offers a
    clustered binomial interval. ``sampled_correct_by_question`` holds each question's passes out of its k, in order.
    """
    if k < 1 or len(passed) % k:
        raise ValueError(f"mean_at_k needs k >= 1 samples per question, got {len(passed)} results for k={k}")
    n = len(passed) // k
    counts = [int(sum(passed[i * k : (i + 1) * k])) for i in range(n)]
    per_question = [count / k for count in counts]
    mean = sum(per_question) / max(n, 1)
    if n < 2 or mean in (0.0, 1.0):
        deff = float(k)
    else:
        variance = sum((p - mean) ** 2 for p in per_question) / (n - 1)
        deff = min(float(k), max(1.0, k * variance / (mean * (1 - mean))))
    n_eff = n * k / deff
    # Not rounded to whole counts: with few questions that moves the rate the interval is of (3/8 and 8/8 passes,
    # n_eff 2.2, would be scored as 2 of 2, an interval reaching 1.0).
    lo, hi = wilson_interval(mean * n_eff, n_eff) if n else (0.0, 0.0)
    return {"mean@k": mean, "mean@k_ci95": [round(lo, 4), round(hi, 4)], "k": k, "questions": n,
            "samples": n * k, "design_effect": round(deff, 3), "sampled_correct_by_question": counts}


def distinct_question_rows(prompts: Sequence) -> list[int]:
    """Indices of the rows whose prompt no earlier row has, in order: the rows that score each question once."""
    seen: set[str] = set()
    kept = []
    for index, prompt in enumerate(prompts):
        key = json.dumps(prompt, sort_keys=True, default=str)  # chat prompts are lists of dicts, not hashable
        if key not in seen:
            seen.add(key)
            kept.append(index)
    return kept


def _distinct_questions(rows) -> tuple[list, list, int]:
    """``(prompts, answers, rows dropped)``: each question of ``rows`` once, warned of when one repeats.

    A repeated question is one question: scored twice it would weigh double in pass@1 and mean@k, and their intervals,
    which take each row for an independent question, would narrow as if it were two."""
    prompts, answers = list(rows["prompt"]), list(rows["answer"])
    kept = distinct_question_rows(prompts)
    dropped = len(prompts) - len(kept)
    if dropped:
        warnings.warn(f"eval: {dropped} repeated question{'s' if dropped > 1 else ''} of {len(prompts)} rows dropped "
                      "(same prompt as an earlier row): each distinct question is scored once, so pass@1, mean@k and "
                      "their intervals count it once", stacklevel=3)
    return [prompts[i] for i in kept], [answers[i] for i in kept], dropped


def sampled_settings(temperature: float = 1.0, top_p: float = 1.0, top_k: int | None = 0, min_p: float | None = None,
                     repetition_penalty: float = 1.0, generation_options: dict | None = None) -> dict:
    """mean@k's sampling settings as its result records them (``generation_options`` only when some are given);
    ``top_k`` None is off, as 0 is, since TRL's configs have used either."""
    settings = {"temperature": temperature, "top_p": top_p, "top_k": top_k or 0, "min_p": min_p,
                "repetition_penalty": repetition_penalty}
    if generation_options:
        settings["generation_options"] = dict(generation_options)
    return settings


SAMPLING_DEFAULTS = {"top_p": 1.0, "top_k": 0, "min_p": None, "repetition_penalty": 1.0}
"""The sampling settings that leave the model's distribution as it is; a label names the others."""


def sampling_label(settings: dict) -> str:
    """``"T=1.0"``, then each setting that reshapes the distribution (``"T=0.8, top_p=0.9"``): a mean@k is comparable
    with another only where both sampled alike. ``rapo eval``'s table titles and the model card's
    note both name the settings so."""
    changed = [f"{name}={settings[name]}" for name, default in SAMPLING_DEFAULTS.items()
               if settings.get(name, default) != default]
    changed += [f"{name}={value}" for name, value in settings.get("generation_options", {}).items()]
    return ", ".join([f"T={settings['temperature']}", *changed])


def evaluate_policy(model, tokenizer, rows, tools, *, max_completion_length: int, max_turn_tokens: int,
                    numeric: bool = True, batch_size: int = 32, progress: bool = True, desc: str = "eval",
                    samples: int = 0, sample_questions: int | None = None, temperature: float = 1.0,
                    top_p: float = 1.0, top_k: int | None = 0, min_p: float | None = None,
                    repetition_penalty: float = 1.0, generation_options: dict | None = None,
                    greedy: bool = True, seed: int = 0, engine: dict | None = None, max_tool_calls: int = 3,
                    max_result_chars: int | None = 4000, answer_stop: str | None = "</answer>",
                    chat_template_kwargs: dict | None = None) -> dict:
    """Rollouts of ``model`` (a loaded model, PEFT or not, in training or not) over ``rows``, without retrieval.

    ``rows`` has ``prompt`` and ``answer`` columns; a row whose prompt an earlier row has is dropped with a warning
    (``duplicate_questions_dropped`` counts them), so each question is scored once. Greedy: the scores of
    `score_texts` plus tool calls and truncation per rollout, wall seconds and the completions (``texts``). With
    ``samples = k > 0`` also mean@k (`mean_at_k`) over the first ``sample_questions`` questions (default all), k
    rollouts each sampled with ``temperature``, ``top_p``, ``top_k`` (0 or None: off), ``min_p``,
    ``repetition_penalty`` and ``generation_options`` (further generation options, as `SamplingSettings.extra`):
    give them the values training sampled with, and mean@k scores the policy as it was trained. The result records
    them beside ``temperature``. Greedy pass@1 decodes plainly, whatever they are.
    ``engine`` holds `TransformersBackend` settings (e.g. ``merged_weights``, ``head_kernel``). ``max_tool_calls``,
    ``max_result_chars`` and ``answer_stop`` as in `RolloutConfig`: a trained policy is scored with the tool budget,
    result cut and stop text it trained with. ``chat_template_kwargs``: the extra chat template arguments training
    rendered its prompts with (``GRPOConfig.chat_template_kwargs``), so the policy is scored on the prompt format it
    trained on.
    ``seed`` seeds the sampled rollouts only: torch's global CPU and CUDA generators are restored afterwards, so an
    evaluation run mid-training leaves the training run's random stream where it was.
    """
    from rapo_trl.rollout.agent import RolloutAgent
    from rapo_trl.rollout.backends import SamplingSettings
    from rapo_trl.rollout.engine import RolloutConfig

    config = RolloutConfig(max_completion_length=max_completion_length, max_turn_tokens=max_turn_tokens,
                           max_tool_calls=max_tool_calls, max_result_chars=max_result_chars, answer_stop=answer_stop)
    start = time.perf_counter()
    prompts, answers, dropped = _distinct_questions(rows)
    result: dict = {}
    if greedy:
        agent = RolloutAgent(model, tokenizer, tools, config, SamplingSettings(do_sample=False), batch_size,
                             engine, chat_template_kwargs=chat_template_kwargs)
        rollouts = _run(agent, prompts, batch_size, progress, desc)
        texts = [tokenizer.decode(r.completion_ids, skip_special_tokens=True) for r in rollouts]
        result = score_texts(texts, answers, numeric)
        n = max(len(rollouts), 1)
        result["tool_calls"] = sum(r.tool_calls for r in rollouts) / n
        result["truncated"] = sum(r.truncated for r in rollouts) / n
        result["texts"] = texts
    if samples > 0:
        settings = sampled_settings(temperature, top_p, top_k, min_p, repetition_penalty, generation_options)
        count = len(prompts) if sample_questions is None else min(sample_questions, len(prompts))
        sampled_prompts = [p for p in prompts[:count] for _ in range(samples)]
        sampled_answers = [a for a in answers[:count] for _ in range(samples)]
        agent = RolloutAgent(model, tokenizer, tools, config, _sampling_of(settings), batch_size, engine,
                             chat_template_kwargs=chat_template_kwargs)
        with _seeded(seed):  # the same draws for a model evaluated twice
            sampled = _run(agent, sampled_prompts, batch_size, progress, f"{desc} mean@{samples}")
        sampled_texts = [tokenizer.decode(r.completion_ids, skip_special_tokens=True) for r in sampled]
        result.update(mean_at_k(passes(sampled_texts, sampled_answers, numeric), samples))
        result.update(settings)
    result["duplicate_questions_dropped"] = dropped
    result["seconds"] = round(time.perf_counter() - start, 1)
    return result


def _sampling_of(settings: dict):
    """The rollout backends' `SamplingSettings` of `sampled_settings`' ``settings``."""
    from rapo_trl.rollout.backends import SamplingSettings

    knobs = {key: value for key, value in settings.items() if key != "generation_options"}
    return SamplingSettings(**knobs, extra=dict(settings.get("generation_options", {})))


@contextlib.contextmanager
def _seeded(seed: int):
    """Torch's global generators seeded with ``seed`` inside, and put back as they were on exit.

    Generation draws from the global generators (``model.generate`` takes no generator), so they are seeded as
    ``torch.manual_seed`` does and forked. CUDA's are forked only once CUDA is initialised: a model on the CPU
    neither draws from them nor should initialise CUDA, and a ``torch.manual_seed`` before initialisation would be
    queued, seeding the caller's CUDA generators later, outside the fork.
    """
    import torch

    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    with torch.random.fork_rng(devices=list(range(torch.cuda.device_count())) if cuda else []):
        if cuda:
            torch.manual_seed(seed)
        else:
            torch.random.default_generator.manual_seed(seed)
        yield


def _run(agent, prompts: list, batch_size: int, progress: bool, desc: str) -> list:
    from tqdm.auto import tqdm

    from rapo_trl.memory import release_freed_memory

    rollouts = []
    with tqdm(total=len(prompts), desc=desc, unit="rollout", disable=not progress) as bar:
        for first in range(0, len(prompts), batch_size):
            batch = prompts[first : first + batch_size]
            rollouts += agent.engine.run([agent.prompt_ids(p) for p in batch], retrieval_enabled=False)
            bar.update(len(batch))
            # A batch's KV caches are hundreds of MB in blocks of changing size; glibc keeps what they freed
            # unless asked, and the next batch's differently shaped blocks do not reuse it.
            release_freed_memory()
    return rollouts


def format_table(results: dict[str, dict], title: str) -> str:
    """A markdown table: one row per model, greedy pass@1 with its interval first, then mean@k when sampled."""
    columns = ["f1", "em", "format_ok", "tool_calls"]
    sampled = any("mean@k" in m for m in results.values())
    k = next((m["k"] for m in results.values() if "k" in m), "k")
    extra = [f"mean@{k}", "95% CI"] if sampled else []
    lines = [f"| model ({title}) | pass@1 | 95% CI | " + " | ".join(extra + columns) + " |",
             "|---" * (len(columns) + len(extra) + 3) + "|"]
    for name, m in results.items():
        if "pass@1" in m:
            lo, hi = m.get("pass@1_ci95", (float("nan"), float("nan")))
            greedy = f"{m['pass@1']:.3f} ({m.get('correct', '?')}/{m.get('n', '?')}) | {lo:.3f}-{hi:.3f}"
        else:
            greedy = "- | -"
        cells = [f"{m[c]:.3f}" if c in m else "-" for c in columns]
        if sampled:
            lo, hi = m.get("mean@k_ci95", (float("nan"), float("nan")))
            cells = ([f"{m['mean@k']:.3f}", f"{lo:.3f}-{hi:.3f}"] if "mean@k" in m else ["-", "-"]) + cells
        lines.append(f"| {name} | {greedy} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
