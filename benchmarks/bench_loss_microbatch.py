"""One loss micro-batch (forward + backward) on real demo rollouts: precision x micro-batch rows x prompt once.

    .venv/bin/python benchmarks/bench_step.py --keep-rollouts /tmp/rollouts.json   # records the rows
    .venv/bin/python benchmarks/bench_loss_microbatch.py --rollouts /tmp/rollouts.json

Each setting runs in its own process (its peak RSS is its own): the demo's warm start with LoRA r16 (all
projections), TRL's fused LM head at T = 0.7, rows drawn from the second recorded generation batch (two prompts x
8 rows; ``--rows`` of them, shuffled as TRL shuffles), padded as TRL pads. The second of two runs is timed.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # common.py, however this is loaded
from common import machine_info, machine_line, markdown_table, use_offline_environment  # noqa: E402

use_offline_environment()  # inherited by each setting's process

GROUP = 8  # rows per prompt in the demo recipe
SETTINGS = [("fp32", False, 1), ("bf16", False, 1), ("bf16", True, 2), ("bf16", True, 4), ("fp32", False, 8),
            ("bf16", False, 8), ("bf16", True, 8)]


def run_one(model_path: str, rollouts: str, precision: str, share: bool, rows_n: int) -> dict:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from rapo_trl.trainer.shared_prompt import distinct_prompts, score_with_shared_prompt

    batch = json.loads(Path(rollouts).read_text())[1]
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype)
    add_fused_lm_head(model, temperature=0.7, outputs=("log_probs", "entropy"))
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=targets)).train()
    order = list(range(len(batch["prompt_ids"])))
    random.Random(0).shuffle(order)  # TRL's shuffled micro-batch: rows of either prompt
    group = order[0] // GROUP
    # RAPO's regrouped micro-batches (rapo_trl.trainer.shared_prompt): consecutive rows of one group
    picked = [group * GROUP + i for i in range(rows_n)] if share else order[:rows_n]
    prompts = [batch["prompt_ids"][i] for i in picked]
    completions = [batch["completion_ids"][i] for i in picked]
    p_len, c_len = max(map(len, prompts)), max(map(len, completions))
    ids = torch.tensor([[0] * (p_len - len(p)) + p + c + [0] * (c_len - len(c)) for p, c in zip(prompts, completions)])
    mask = torch.tensor([[0] * (p_len - len(p)) + [1] * (len(p) + len(c)) + [0] * (c_len - len(c))
                         for p, c in zip(prompts, completions)])
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")

    def step():
        with autocast:
            groups = distinct_prompts(ids, mask, p_len) if share else None
            if groups is not None:
                logps, _ = score_with_shared_prompt(model, ids, mask, c_len, True, groups)
            else:
                labels = ids.masked_fill(mask == 0, -100)
                labels[:, :-c_len] = -100
                logps = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True).log_probs
                logps = logps[:, -c_len:]
        completion_mask = mask[:, -c_len:]
        ((logps * completion_mask).sum() / completion_mask.sum()).backward()

    step()
    started = time.perf_counter()
    step()
    seconds = time.perf_counter() - started
    return {"precision": precision, "prompt_once": share, "rows": rows_n, "prompts": len(set(map(tuple, prompts))),
            "prompt_len": p_len, "completion_len": c_len, "seconds": round(seconds, 2),
            "seconds_per_row": round(seconds / rows_n, 3),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "threads": torch.get_num_threads()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", required=True, help="rollouts.json recorded by bench_step.py --keep-rollouts")
    parser.add_argument("--model", default="runs/demo/model/sft-warm-start")
    parser.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--results", default="benchmarks/results/loss_microbatch")
    args = parser.parse_args()
    if args.one:
        precision, share, rows_n = args.one
        print(json.dumps(run_one(args.model, args.rollouts, precision, share == "1", int(rows_n))))
        return
    results = []
    for precision, share, rows_n in SETTINGS:
        out = subprocess.run([sys.executable, __file__, "--rollouts", args.rollouts, "--model", args.model, "--one",
                              precision, str(int(share)), str(rows_n)], capture_output=True, text=True, check=True)
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(results[-1], flush=True)
    machine = machine_info()
    head = ["precision", "prompt once", "rows", "prompts", "prompt len", "completion len", "s", "s/row", "peak RSS MB"]
    keys = ["precision", "prompt_once", "rows", "prompts", "prompt_len", "completion_len", "seconds", "seconds_per_row",
            "peak_rss_mb"]
    lines = markdown_table(head, [[r[k] for k in keys] for r in results])
    text = ("# One loss micro-batch, forward + backward\n\n" + "\n".join(lines) + "\n\n"
            f"Model `{args.model}` + LoRA r16, {results[0]['threads']} threads, {machine['platform']}; "
            f"{machine_line(machine)}. Command: `.venv/bin/python benchmarks/bench_loss_microbatch.py --rollouts ...`\n")
    Path(args.results).with_suffix(".md").write_text(text)
    Path(args.results).with_suffix(".json").write_text(json.dumps(
        {"platform": machine["platform"], "torch": machine["torch"], "machine": machine, "runs": results}, indent=2))
    print(text)


if __name__ == "__main__":
    main()
