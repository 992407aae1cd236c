"""A scenario of tests/test_multiprocess.py, run under `torchrun --nproc_per_node 2` (by `multiprocess_scenarios.py`,
or alone): one step where rank 0's group is flat (all rewards 0) and rank 1's is not. ``dynamic_sampling``: rank 0's
group is replaced, and rank 1 joins each round's scoring with no rows of its own. ``group_failed``
(retrieve_failed_groups_max_reward): only rank 0's hybrid rows may retrieve, judged from rewards gathered over both
ranks. Each rank dumps what it computed."""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from rapo_trl.config import RAPOConfig  # noqa: E402
from rapo_trl.trainer import RAPOTrainer  # noqa: E402
from tests.helpers.fakes import EchoTool, FixedStore  # noqa: E402
from tests.helpers.multiprocess import dump_rank, finish  # noqa: E402
from tests.trainer.test_dynamic_sampling import answer_reward, dataset  # noqa: E402


def main(model_dir: str, out_dir: str, mode: str) -> None:
    option = dict(dynamic_sampling_max_rounds=2) if mode in ("dynamic_sampling", "both_flat") else dict(
        retrieve_failed_groups_max_reward=0.0, retrieve_prob=1.0)
    args = RAPOConfig(
        output_dir=out_dir, use_cpu=True, bf16=False, report_to="none", per_device_train_batch_size=4,
        num_generations=4, max_completion_length=24, max_turn_tokens=24, seed=0, save_strategy="no", **option,
    )
    # both_flat: both ranks' prompts are flat and two prompts can replace them; each must take another one.
    data = dataset(n=4, flat=(0, 1)) if mode == "both_flat" else dataset()
    trainer = RAPOTrainer(AutoModelForCausalLM.from_pretrained(model_dir), answer_reward, args=args,
                          train_dataset=data, processing_class=AutoTokenizer.from_pretrained(model_dir),
                          tools=[EchoTool()], trace_store=FixedStore() if mode == "group_failed" else None)
    rank = trainer.accelerator.process_index
    trainer.model.train()
    torch.manual_seed(rank)
    inputs = [dict(data[rank]) for _ in range(4)]  # rank 0: prompt 0, whose rewards are all 0; rank 1: prompt 1
    batch = trainer._generate_and_score_completions(inputs)
    metrics = {name: values[-1] for name, values in trainer._metrics["train"].items()}
    dump = {
        "replaced": sorted(trainer.last_rollout.replaced),
        "replacement_prompts": sorted({row["answer"] for row in trainer.last_rollout.replaced.values()}),
        "answers": [row["answer"] for row in inputs],
        "advantages": batch["advantages"].tolist(),
        "metrics": {k: v for k, v in metrics.items() if k.startswith(("dynamic_sampling/", "rapo/step_has_signal"))},
        "hybrid": [row.is_hybrid for row in trainer.last_rollout.rows],
        "guided_group_share": metrics.get("rapo/guided_group_share"),
    }
    dump_rank(out_dir, rank, dump)

if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "dynamic_sampling")
    finish()
