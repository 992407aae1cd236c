"""A scenario of tests/test_multiprocess.py, run under `torchrun --nproc_per_node 2` (by `multiprocess_scenarios.py`,
or alone): the retrieved-token loss on a micro-batch where rank 0 holds retrieved tokens to learn and rank 1 none.
Both ranks must compute the term and join its gather (rank 1's term is zero). Each rank dumps its loss, its term and
the logged metric."""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from rapo_trl.config import RAPOConfig  # noqa: E402
from rapo_trl.trainer import RAPOTrainer  # noqa: E402
from rapo_trl.trainer.loss_terms import RETRIEVED_WEIGHT_KEY  # noqa: E402
from tests.helpers.fakes import EchoTool  # noqa: E402
from tests.helpers.multiprocess import dump_rank, finish  # noqa: E402
from tests.trainer.test_dynamic_sampling import answer_reward, dataset  # noqa: E402


def main(model_dir: str, out_dir: str) -> None:
    args = RAPOConfig(
        output_dir=out_dir, use_cpu=True, bf16=False, report_to="none", per_device_train_batch_size=4,
        num_generations=4, max_completion_length=24, max_turn_tokens=24, seed=0, save_strategy="no",
        retrieved_token_loss_weight=0.5,
    )
    data = dataset()
    trainer = RAPOTrainer(AutoModelForCausalLM.from_pretrained(model_dir), answer_reward, args=args,
                          train_dataset=data, processing_class=AutoTokenizer.from_pretrained(model_dir),
                          tools=[EchoTool()])
    rank = trainer.accelerator.process_index
    trainer.model.train()
    torch.manual_seed(rank)
    batch = trainer._generate_and_score_completions([dict(data[rank]) for _ in range(4)])
    weights = torch.zeros_like(batch[RETRIEVED_WEIGHT_KEY])
    if rank == 0:  # as if row 0 had retrieved a step and scored above its group
        weights[0, :3] = 0.5
    batch[RETRIEVED_WEIGHT_KEY] = weights
    trainer.current_gradient_accumulation_steps = 1
    loss = trainer.compute_loss(trainer.model, batch)
    loss.backward()
    metric = trainer._metrics["train"]["rapo/retrieved_token_loss"]
    dump = {"loss": loss.item(), "metric": metric[-1] if metric else None}
    dump_rank(out_dir, rank, dump)

if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main(sys.argv[1], sys.argv[2])
    finish()
