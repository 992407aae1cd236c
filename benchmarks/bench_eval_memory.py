"""Peak resident memory of ``rapo eval``'s greedy pass over a recipe's eval questions, at a given batch.

    .venv/bin/python benchmarks/bench_eval_memory.py --recipe configs/demo_cpu.yaml --questions 64 --batch 64

The model is the recipe's base model with a fresh LoRA adapter of the recipe (PEFT, as ``rapo eval`` loads a
trained model; its B matrices are zero, so it generates as the base: no tool calls, every row runs to its turn
budget, the longest rows an eval sees). Peak RSS is read two ways: the kernel's high-water mark (``VmHWM``) and a
thread sampling ``VmRSS`` every 0.2 s, with the resident size after loading and at the end. Memory figures hold on
a loaded machine; the seconds it prints do not. Each run appends one record to ``results/eval_memory.json``.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # common.py, however this is loaded
from common import RESULTS, command_line, machine_info, update_results, use_offline_environment  # noqa: E402

use_offline_environment()


def status_mb(field: str) -> float:
    """A ``/proc/self/status`` memory field (``VmRSS``, ``VmHWM``) in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


class PeakSampler:
    """The largest ``VmRSS`` seen by a background thread, when (seconds from start), and where the main thread was
    then (its innermost frames in the package, transformers, peft or torch): what made the peak."""

    def __init__(self, every_s: float = 0.2):
        self.every_s, self.peak_mb, self.at_s, self.where = every_s, 0.0, 0.0, []
        self._stop = threading.Event()
        self._start = time.perf_counter()
        self._main = threading.get_ident()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            rss = status_mb("VmRSS")
            if rss > self.peak_mb:
                self.peak_mb, self.at_s = rss, time.perf_counter() - self._start
                frame = sys._current_frames().get(self._main)
                stack = traceback.extract_stack(frame) if frame is not None else []
                self.where = [f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in stack
                              if any(part in f.filename for part in ("rapo_trl", "transformers", "peft"))][-6:]

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default="configs/demo_cpu.yaml")
    parser.add_argument("--questions", type=int, default=64)
    parser.add_argument("--batch", type=int, default=64, help="rows generated together (the recipe's eval_batch_size)")
    parser.add_argument("--merged-weights", choices=("on", "off"), default="off",
                        help="decode on the adapter folded into a copy of the weights, or through the adapter")
    parser.add_argument("--label", default="", help="a name for this record")
    parser.add_argument("--results", default=str(RESULTS / "eval_memory.json"))
    args = parser.parse_args()

    from peft import LoraConfig, get_peft_model

    from rapo_trl.cli import parse_recipe
    from rapo_trl.cli.common import build_tools, eval_splits, load_policy, resolve_model_path, training_rows
    from rapo_trl.evaluation import evaluate_policy

    script, rapo_args, model_args = parse_recipe("eval", ["--config", args.recipe])[:3]
    model, tokenizer = load_policy(resolve_model_path(model_args.model_name_or_path))
    lora = LoraConfig(r=model_args.lora_r, lora_alpha=model_args.lora_alpha, lora_dropout=0.0,
                      target_modules=model_args.lora_target_modules, task_type="CAUSAL_LM")
    model = get_peft_model(model, lora)
    model.eval()
    tools = build_tools(script)
    rows = training_rows(script, eval_splits(script)[0], tools)
    rows = rows.select(range(min(args.questions, len(rows))))
    loaded_mb = status_mb("VmRSS")
    engine = {"merged_weights": args.merged_weights == "on"}
    with PeakSampler() as sampler:
        metrics = evaluate_policy(model, tokenizer, rows, tools, max_completion_length=rapo_args.max_completion_length,
                                  max_turn_tokens=rapo_args.max_turn_tokens, batch_size=args.batch, progress=True,
                                  **({"engine": engine} if engine else {}))
    record = {"label": args.label, "questions": len(rows), "batch": args.batch, "merged_weights": args.merged_weights,
              "dtype": str(next(model.parameters()).dtype), "loaded_rss_mb": round(loaded_mb),
              "peak_rss_mb_sampled": round(sampler.peak_mb), "peak_at_s": round(sampler.at_s, 1),
              "peak_where": sampler.where,
              "vm_hwm_mb": round(status_mb("VmHWM")), "end_rss_mb": round(status_mb("VmRSS")),
              "completion_tokens": metrics.get("completion_tokens"), "truncated": metrics.get("truncated"),
              "seconds_under_this_load": metrics["seconds"], "machine": machine_info("peft"),
              "command": command_line()}
    print({k: v for k, v in record.items() if k != "machine"}, flush=True)
    update_results(Path(args.results), lambda data: data.setdefault("runs", []).append(record))


if __name__ == "__main__":
    main()
