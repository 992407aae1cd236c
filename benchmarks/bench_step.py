"""Cost of one RL step of a recipe: seconds by phase, rollouts and tokens per hour, peak memory.

    .venv/bin/python benchmarks/bench_step.py --recipe configs/demo_cpu.yaml --steps 4

Three arms, each in its own process (so each peak RSS is its own), on the same model and training rows:

  old_recipe   RAPOTrainer with the demo recipe without its speed settings: fp32 everywhere, one prompt's G rows per
               step, the loss row by row (per_device_train_batch_size 1, gradient accumulation G), every row
               running its own copy of the prompt (a micro-batch of one row has no prompt to share). The baseline.
  rapo         RAPOTrainer with the recipe as it is (the candidate): the precision rule (bf16 on a CPU with
               AVX512-BF16/AMX: frozen weights bf16, LoRA fp32), several prompts per step decoded together, each
               loss micro-batch running each of its distinct prompts once.
  rapo_merged  the rapo arm decoding on merged weights (``merged_weights=True``: the LoRA adapter folded into a copy
               of the adapted weights) instead of through the adapter.
  rapo_matmul_head / rapo_merged_matmul_head
               the rapo arm / the rapo_merged arm with the LM head in decode on ``W @ h.T`` (``head_kernel``)
               instead of ``F.linear``.
  grpo         TRL's plain GRPOTrainer with the recipe's batch and precision settings, fed the *same rollouts* the
               rapo arm generated (replayed through ``rollout_func``: same prompts, completions and tool masks), so
               its loss part is timed on the same rows; no tools, no retrieval, no RAPO objective.

Per step: generate / tools / retrieval (the rollout engine's own clock), scoring (the rest of TRL's
``_generate_and_score_completions``: rewards, advantages, old log-probs when needed), loss forward,
backward, optimizer; policy tokens per second of generation; rollouts and completion tokens per hour; the
process's peak RSS (and peak CUDA memory); with ``results/limits.json`` of this CPU (``bench_limits.py``), each
arm's decode tok/s and loss s/row as a fraction of their limits at its precision and batch. The model is the demo's warm start (``<output_dir>/sft-warm-start``)
when it exists, else the recipe's base model, so completion lengths are those of the demo's RL steps. Writes
``benchmarks/results/step.{json,md}``, naming the baseline and candidate arms at its top. Engine settings side by
side in one run, each arm with its fraction of the limits:

    .venv/bin/python benchmarks/bench_step.py --steps 4 --arms old_recipe rapo rapo_merged
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # common.py, however this is loaded
from common import (  # noqa: E402
    RESULTS,
    machine_info,
    markdown_table,
    shown_path,
    use_offline_environment,
    with_notes,
)

use_offline_environment()  # nothing loads from a hub here; inherited by the arms' processes
ENGINE_ARMS = {"rapo_merged": {"merged_weights": True}, "rapo_matmul_head": {"head_kernel": "weight_matmul"},
               "rapo_merged_matmul_head": {"merged_weights": True, "head_kernel": "weight_matmul"}}
"""The rapo arm with other settings of the generation backend (``TransformersBackend``)."""
ARMS = ("old_recipe", "rapo", *ENGINE_ARMS, "grpo")
BASELINE, CANDIDATE = "old_recipe", "rapo"
# The demo recipe without its speed settings, as rapo train flags (the rest of the recipe is shared).
OLD_RECIPE = {"bf16": "false", "per_device_train_batch_size": "1", "gradient_accumulation_steps": "8",
              "steps_per_generation": "8", "lora_dropout": "0.05"}
PHASES = ("generate", "tools", "retrieval", "scoring", "loss_forward", "backward", "optimizer")


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def _rss_mb() -> float:
    """The process's resident memory now (the peak above only ever grows, so it cannot show growth step over step)."""
    with open("/proc/self/statm") as statm:  # Linux: pages of size, resident, ...
        return int(statm.read().split()[1]) * resource.getpagesize() / 2**20


class _Clock:
    """Seconds per phase per optimizer step, from wrappers around the trainer's own methods."""

    def __init__(self):
        self.current: dict[str, float] = defaultdict(float)
        self.steps: list[dict[str, float]] = []

    def wrap(self, owner, name: str, phase: str) -> None:
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.current[phase] += time.perf_counter() - start

        setattr(owner, name, timed)

    def close_step(self, extra: dict[str, float]) -> None:
        self.steps.append({**self.current, **extra})
        self.current = defaultdict(float)


def run_arm(arm: str, recipe: str, steps: int, rollouts_file: str, out_file: str, overrides: list[str]) -> None:
    import torch
    import yaml
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer, get_peft_config

    from rapo_trl.cli import parse_recipe
    from rapo_trl.cli.common import build_tools, open_store, resolve_model_path, training_rows
    from rapo_trl.cli.rewards import training_rewards
    from rapo_trl.cli.trainer_build import warm_policy
    from rapo_trl.hardware import frozen_weights_dtype
    from rapo_trl.trainer import RAPOTrainer

    settings = dict(item.split("=", 1) for item in overrides)
    if arm == "old_recipe":
        settings = {**settings, **OLD_RECIPE}
    flags = [part for key, value in settings.items() for part in ("--" + key, value)]
    script, args, model_args = parse_recipe("train", ["--config", recipe, *flags])[:3]
    warm = Path(args.output_dir) / "sft-warm-start"
    base_path = resolve_model_path(model_args.model_name_or_path)
    model_path = str(warm) if (warm / "config.json").is_file() else base_path
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    peft = get_peft_config(model_args)
    policy = model_path
    if peft is not None and (warm / "adapter_config.json").is_file():  # the warm start as an adapter: as rapo train
        policy, peft = warm_policy(base_path, str(warm), peft, args, model_args)
        model_path = str(warm)
    rows = training_rows(script, "train")
    reward_funcs, args.reward_weights = training_rewards(script, args.reward_weights)
    args.max_steps, args.logging_steps = steps, 1
    args.output_dir = tempfile.mkdtemp(prefix=f"bench-step-{arm}-")
    clock = _Clock()
    optimizer_start = [0.0]

    class StepClock(TrainerCallback):
        def on_pre_optimizer_step(self, *a, **k):
            optimizer_start[0] = time.perf_counter()

        def on_optimizer_step(self, *a, **k):
            clock.current["optimizer"] += time.perf_counter() - optimizer_start[0]

        def on_step_end(self, *a, **k):
            clock.close_step({"peak_rss_mb": _peak_rss_mb(), "rss_mb": _rss_mb()})

    if arm == "grpo":
        recorded = json.loads(Path(rollouts_file).read_text())
        # The recipe's GRPOConfig fields as written (not RAPOConfig's derived values), with RAPO's loss settings.
        written = yaml.safe_load(Path(recipe).read_text())
        fields = {k: v for k, v in written.items() if k in GRPOConfig.__dataclass_fields__}
        loss = {k: getattr(args, k) for k in ("loss_type", "epsilon", "epsilon_high", "delta", "beta")}
        fields.update({k.split("=", 1)[0]: getattr(args, k.split("=", 1)[0]) for k in overrides
                       if k.split("=", 1)[0] in GRPOConfig.__dataclass_fields__})
        grpo_args = GRPOConfig(**{**fields, **loss, "output_dir": args.output_dir, "max_steps": steps,
                                  "logging_steps": 1, "bf16": args.bf16, "fp16": args.fp16})
        half = frozen_weights_dtype(args.bf16, args.fp16)
        if peft is not None and half is not None:  # the same frozen-weight dtype as RAPOTrainer's rule loads
            grpo_args.model_init_kwargs = {**(grpo_args.model_init_kwargs or {}), "dtype": half}
        trainer = GRPOTrainer(policy, reward_funcs, args=grpo_args, train_dataset=rows, processing_class=tokenizer,
                              peft_config=peft, callbacks=[StepClock()])
        replay = iter(recorded)

        def replayed(prompts, trainer=None):
            return {**next(replay), "logprobs": None}

        trainer.rollout_func = replayed
    else:
        store = open_store(script, must_exist=True) if Path(script.store_path).exists() else None
        trainer = RAPOTrainer(policy, reward_funcs, args=args, train_dataset=rows, processing_class=tokenizer,
                              peft_config=peft, trace_store=store, tools=build_tools(script), callbacks=[StepClock()])
        recorded = []
        rollout = trainer.rollout_func

        def recording(prompts, trainer=None):
            out = rollout(prompts, trainer)
            recorded.append({k: out[k] for k in ("prompt_ids", "completion_ids", "env_mask")})
            return out

        trainer.rollout_func = recording
        backend = trainer.rollout_engine.backend
        if arm in ENGINE_ARMS and getattr(backend, "decode_model", None) is not None:
            from rapo_trl.rollout.backends.decode_model import DecodeModel

            backend.decode_model = DecodeModel(**ENGINE_ARMS[arm])
    engine_stats = []
    clock.wrap(trainer, "_generate_and_score_completions", "generate_and_score")
    clock.wrap(trainer, "_compute_loss", "loss_forward")
    clock.wrap(trainer.accelerator, "backward", "backward")
    if arm != "grpo":
        roll_out = trainer.rollout_engine.roll_out

        def counted(*a, **k):
            result = roll_out(*a, **k)
            s, rows = result.stats, result.rows
            engine_stats.append((s.generate_seconds, s.tool_seconds, s.retrieval_seconds,
                                 sum(sum(r.env_mask) for r in rows), sum(len(r.completion_ids) for r in rows)))
            return result

        trainer.rollout_engine.roll_out = counted
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - started
    per_step = []
    for i, phases in enumerate(clock.steps):
        # A generation serves steps_per_generation / gradient_accumulation_steps optimizer steps (1 in these recipes).
        gen, tools, retrieval, tokens, completion_tokens = (
            engine_stats[i] if i < len(engine_stats) else (0.0, 0.0, 0.0, 0, 0))
        rollout_total = gen + tools + retrieval
        split = {"generate": gen, "tools": tools, "retrieval": retrieval,
                 "scoring": phases.get("generate_and_score", 0.0) - rollout_total,
                 "loss_forward": phases.get("loss_forward", 0.0), "backward": phases.get("backward", 0.0),
                 "optimizer": phases.get("optimizer", 0.0)}
        if arm == "grpo" and i < len(recorded):
            completion_tokens = sum(len(ids) for ids in recorded[i]["completion_ids"])
        per_step.append({"split_s": split, "policy_tokens": tokens, "completion_tokens": completion_tokens,
                         "peak_rss_mb": phases["peak_rss_mb"], "rss_mb": phases["rss_mb"]})
    history = [e for e in trainer.state.log_history if "step_time" in e]
    result = {"arm": arm, "model": shown_path(model_path), "wall_s": wall, "steps": per_step,
              "step_s": [e["step_time"] for e in history], "peak_rss_mb": _peak_rss_mb(),
              "rollouts_per_step": args.per_device_train_batch_size * args.gradient_accumulation_steps,
              "precision": "bf16" if args.bf16 else "fp16" if args.fp16 else "fp32",
              "batch": {"per_device_train_batch_size": args.per_device_train_batch_size,
                        "gradient_accumulation_steps": args.gradient_accumulation_steps,
                        "steps_per_generation": args.steps_per_generation,
                        # RAPOTrainer always trims and runs a micro-batch's prompt once; one row has none to share
                        "trim_padding": None if arm == "grpo" else True,
                        "share_prompt_forward": None if arm == "grpo" else args.per_device_train_batch_size > 1}}
    if torch.cuda.is_available():
        result["peak_cuda_mb"] = torch.cuda.max_memory_allocated() / 2**20
    folder = getattr(getattr(getattr(trainer, "rollout_engine", None), "backend", None), "decode_model", None)
    if folder is not None:  # what the KV-cache loop decoded on, and what folding the adapter cost
        result["decode"] = {"weights": folder.weights, "merged_weights": folder.merged_weights,
                            "head_kernel": folder.head_kernel, "refreshes": folder.refreshes,
                            "refresh_s": round(folder.refresh_seconds, 3), "extra_mb": round(folder.extra_bytes / 2**20)}
    if arm == "rapo":
        Path(rollouts_file).write_text(json.dumps(recorded))
    Path(out_file).write_text(json.dumps(result))


def summarise(raw: dict, skip_first: bool) -> dict:
    """Mean seconds per phase over the steps (the first dropped as warm-up when there are several)."""
    steps = raw["steps"][1:] if skip_first and len(raw["steps"]) > 1 else raw["steps"]
    split = {p: sum(s["split_s"][p] for s in steps) / len(steps) for p in PHASES}
    step_s = sum(split.values())
    generate = split["generate"]
    tokens = sum(s["policy_tokens"] for s in steps) / len(steps)
    completion_tokens = sum(s.get("completion_tokens", 0) for s in steps) / len(steps)
    rollouts = raw.get("rollouts_per_step")
    summary = {"step_s": round(step_s, 2), "split_s": {p: round(v, 2) for p, v in split.items()},
               "loss_s": round(split["loss_forward"] + split["backward"], 2),
               "rollouts_per_step": rollouts, "precision": raw.get("precision"),
               "rollouts_per_hour": round(3600 * rollouts / step_s) if rollouts else None,
               "completion_tokens_per_hour": round(3600 * completion_tokens / step_s),
               "loss_s_per_rollout": round((split["loss_forward"] + split["backward"]) / rollouts, 3) if rollouts else None,
               "policy_tokens_per_step": round(tokens, 1),
               "generate_tokens_per_s": round(tokens / generate, 1) if generate else None,
               "peak_rss_mb": round(raw["peak_rss_mb"]), "batch": raw["batch"], "steps_timed": len(steps),
               **({"decode": raw["decode"]} if "decode" in raw else {}),
               "rss_mb_per_step": [round(s["rss_mb"]) for s in raw["steps"] if "rss_mb" in s]}
    if "peak_cuda_mb" in raw:
        summary["peak_cuda_mb"] = round(raw["peak_cuda_mb"])
    return summary


def of_limits(report: dict, path: Path = RESULTS / "limits.json") -> dict | None:
    """Each arm's decode and loss against this machine's limits (``bench_limits.py``) at the arm's precision, decode
    rows, rows sharing a prompt forward and mean completion: None without a limits.json measured on this CPU."""
    limits = json.loads(path.read_text()) if path.is_file() else None
    # A VM's CPU name ("AMD EPYC") hides its generation: the bf16 flag and core count tell more of them apart.
    if not limits or any(limits["machine"].get(k) != report["machine"].get(k) for k in ("cpu", "cpus", "native_bf16")):
        return None
    import bench_limits

    fractions = {}
    for arm, r in report["runs"].items():
        b = r["batch"]
        if r.get("precision") not in limits["matmul"] or not r.get("rollouts_per_hour"):
            continue
        stage = bench_limits.stage_limits(
            limits, r["precision"], b["per_device_train_batch_size"] * b["steps_per_generation"],
            b["per_device_train_batch_size"] if b.get("share_prompt_forward") else 1,
            r["completion_tokens_per_hour"] / r["rollouts_per_hour"])
        decode, loss = stage["decode"]["tokens_per_s"], stage["loss"]["seconds_per_row"]
        fractions[arm] = {"decode_limit_tok_s": round(decode, 1), "loss_limit_s_per_row": round(loss, 3),
                          "decode_fraction": round(r["generate_tokens_per_s"] / decode, 3)
                          if r.get("generate_tokens_per_s") else None,
                          "loss_fraction": round(loss / r["loss_s_per_rollout"], 3)}
    return {"limits": shown_path(path), "measured": limits["machine"]["date"], "arms": fractions}


def limit_lines(of_limit: dict | None) -> str:
    if not of_limit:
        return ""
    lines = [f"Against this machine's limits ({Path(of_limit['limits']).name}, measured {of_limit['measured']}; "
             "fraction = limit time / time taken, at each arm's precision and batch):\n"]
    for arm, f in of_limit["arms"].items():
        decode = (f"decode {f['decode_fraction']:.2f} of {f['decode_limit_tok_s']:.0f} tok/s"
                  if f["decode_fraction"] is not None else "decode -")
        lines.append(f"- {arm}: {decode}; loss {f['loss_fraction']:.2f} of {f['loss_limit_s_per_row']:.3f} s/row\n")
    return "".join(lines) + "\n"


def table(report: dict) -> str:
    runs = report["runs"]
    cuda = any("peak_cuda_mb" in r for r in runs.values())
    head = ["arm", "precision", "rollouts/step", "step s", *[f"{p} s" for p in PHASES], "loss s", "gen tok/s",
            "rollouts/h", "completion tok/h", "peak RSS MB", *(["peak CUDA MB"] if cuda else []), "batch"]
    rows = []
    for arm, r in runs.items():
        b = r["batch"]
        batch = f"{b['per_device_train_batch_size']}x{b['gradient_accumulation_steps']}" + (
            ", trim" if b.get("trim_padding") else ", no trim") + (", prompt once" if b.get("share_prompt_forward") else "")
        if r.get("decode"):
            d = r["decode"]
            batch += f", decode on {d['weights']}" + (f" (+{d['extra_mb']} MB, {d['refreshes']} folds "
                                                      f"{d['refresh_s']:.2f} s)" if d["weights"] == "merged" else "")
        cells = [arm, str(r.get("precision") or "-"), str(r.get("rollouts_per_step") or "-"), f"{r['step_s']:.1f}",
                 *[f"{r['split_s'][p]:.2f}" for p in PHASES], f"{r['loss_s']:.1f}",
                 str(r["generate_tokens_per_s"] or "-"), str(r.get("rollouts_per_hour") or "-"),
                 str(r.get("completion_tokens_per_hour") or "-"), str(r["peak_rss_mb"]),
                 *([str(r.get("peak_cuda_mb", "-"))] if cuda else []), batch]
        rows.append(cells)
    return "\n".join(markdown_table(head, rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default="configs/demo_cpu.yaml")
    parser.add_argument("--steps", type=int, default=4, help="RL steps per arm (the first is dropped as warm-up)")
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    parser.add_argument("--arm", help=argparse.SUPPRESS)  # internal: run one arm in this process
    parser.add_argument("--rollouts", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--results", default=str(RESULTS / "step"), help="path stem of the .json/.md results")
    parser.add_argument("--keep-rollouts", help="copy the rapo arm's recorded rollouts here (bench_loss_microbatch.py)")
    parser.add_argument("--report-only", action="store_true", help="rewrite the .md from the .json")
    parser.add_argument("--set", nargs="+", default=[], metavar="FIELD=VALUE",
                        help="recipe fields to override, as rapo train flags (e.g. use_cpu=false num_generations=16)")
    args = parser.parse_args()
    if args.report_only:
        write_markdown(json.loads(Path(args.results).with_suffix(".json").read_text()), Path(args.results))
        return
    if args.arm:
        run_arm(args.arm, args.recipe, args.steps, args.rollouts, args.out, args.set)
        return
    if "grpo" in args.arms and "rapo" not in args.arms:
        parser.error("the grpo arm replays the rapo arm's rollouts: run them together")
    order = [a for a in ("rapo", "old_recipe", *ENGINE_ARMS, "grpo") if a in args.arms]  # grpo replays rapo's
    work = Path(tempfile.mkdtemp(prefix="bench-step-"))
    rollouts = work / "rollouts.json"
    raw = {}
    for arm in order:
        out = work / f"{arm}.json"
        print(f"[bench_step] {arm}: {args.steps} steps of {args.recipe}", flush=True)
        subprocess.run([sys.executable, __file__, "--arm", arm, "--recipe", args.recipe, "--steps", str(args.steps),
                        "--rollouts", str(rollouts), "--out", str(out), *(["--set", *args.set] if args.set else [])],
                       check=True)
        raw[arm] = json.loads(out.read_text())
    if args.keep_rollouts and rollouts.is_file():
        Path(args.keep_rollouts).write_text(rollouts.read_text())
    runs = {arm: summarise(raw[arm], skip_first=True) for arm in args.arms if arm in raw}
    report = {"baseline": BASELINE, "candidate": CANDIDATE, "recipe": args.recipe, "machine": machine_info(),
              "model": raw[order[0]]["model"], "steps": args.steps, "set": args.set, "runs": runs, "raw": raw}
    if "rapo" in runs:
        report["steps_per_hour"] = {arm: round(3600 / r["step_s"], 1) for arm, r in runs.items() if arm != "grpo"}
    if {CANDIDATE, BASELINE} <= set(runs):
        base, new = runs[BASELINE], runs[CANDIDATE]
        report["rollouts_per_hour_ratio"] = round(new["rollouts_per_hour"] / base["rollouts_per_hour"], 2)
        report["completion_tokens_per_hour_ratio"] = round(
            new["completion_tokens_per_hour"] / base["completion_tokens_per_hour"], 2)
        report["memory_ratio"] = round(new["peak_rss_mb"] / base["peak_rss_mb"], 3)
    for arm in (a for a in ENGINE_ARMS if a in runs and "rapo" in runs):  # the engine setting's own effect
        other, rapo = runs[arm], runs["rapo"]
        report.setdefault("rapo_vs_engine_arms", {})[arm] = {
            "generate_tokens_per_s_ratio": round(rapo["generate_tokens_per_s"] / other["generate_tokens_per_s"], 2)
            if rapo.get("generate_tokens_per_s") and other.get("generate_tokens_per_s") else None,
            "peak_rss_mb_difference": rapo["peak_rss_mb"] - other["peak_rss_mb"]}
    if {"rapo", "grpo"} <= set(runs):
        report["loss_ratio_rapo_vs_grpo"] = round(runs["rapo"]["loss_s"] / runs["grpo"]["loss_s"], 2)
    report["of_limit"] = of_limits(report)
    stem = Path(args.results)
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(report, indent=2))
    write_markdown(report, stem)


def write_markdown(report: dict, stem: Path) -> None:
    steps, recipe = report["steps"], report["recipe"]
    if "grpo" in report["runs"]:  # plain GRPOTrainer never trims (records written before this label was fixed)
        report["runs"]["grpo"]["batch"]["trim_padding"] = None
    text = (f"# Step cost: {recipe}\n\n{table(report)}\n\n"
            f"Mean over steps 2..{steps} of each arm (step 1 is warm-up). Model: `{report['model']}`. "
            f"Machine: {report['machine']['platform']}, {report['machine']['cpus']} CPUs, torch "
            f"{report['machine']['torch']}, transformers {report['machine']['transformers']}, trl "
            f"{report['machine']['trl']}.\n\n"
            + (f"Baseline: `{report['baseline']}`; candidate: `{report['candidate']}`.\n\n" if "baseline" in report
               else "")
            + "".join(f"- {k}: {report[k]}\n" for k in ("steps_per_hour", "rollouts_per_hour_ratio",
                                                        "completion_tokens_per_hour_ratio", "speedup", "memory_ratio",
                                                        "loss_ratio_rapo_vs_grpo", "rapo_vs_engine_arms") if k in report)
            + "\n" + limit_lines(report["of_limit"] if "of_limit" in report else of_limits(report))
            + f"Command: `.venv/bin/python benchmarks/bench_step.py --recipe {recipe} --steps {steps}"
            + (f" --set {' '.join(report['set'])}" if report.get("set") else "") + "`\n")
    text = with_notes(text, stem.parent / f"{stem.name}_notes.md")  # hand-written profile and reading
    stem.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
