"""A scenario of tests/test_multiprocess.py, run under `torchrun --nproc_per_node 2` (by `multiprocess_scenarios.py`,
or alone): `trainer.train()` itself, so the loss runs on the model as accelerate wraps it for several processes
(DistributedDataParallel). One step with the shared-prompt forward (gradient checkpointing off: it turns that forward
off), one with each row running its prompt, from the same start and seed. Each rank dumps both steps' logged loss
and grad norm, and how many shared-prompt forwards ran."""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))

from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from rapo_trl.config import RAPOConfig  # noqa: E402
from rapo_trl.trainer import RAPOTrainer, shared_prompt  # noqa: E402
from tests.helpers.fakes import EchoTool  # noqa: E402
from tests.helpers.multiprocess import dump_rank, finish  # noqa: E402
from tests.trainer.test_dynamic_sampling import answer_reward, dataset  # noqa: E402


def _train(model_dir: str, out_dir: str, **settings) -> dict:
    """One optimizer step of ``trainer.train()``; the step's logged loss and grad norm."""
    args = RAPOConfig(
        output_dir=out_dir, use_cpu=True, bf16=False, report_to="none", per_device_train_batch_size=4,
        num_generations=4, max_completion_length=16, max_turn_tokens=16, seed=0, save_strategy="no", max_steps=1,
        logging_steps=1, gradient_checkpointing=False, **settings,
    )
    trainer = RAPOTrainer(AutoModelForCausalLM.from_pretrained(model_dir), answer_reward, args=args,
                          train_dataset=dataset(flat=()), processing_class=AutoTokenizer.from_pretrained(model_dir),
                          tools=[EchoTool()])
    trainer.train()
    (step,) = [entry for entry in trainer.state.log_history if "loss" in entry]
    return {"wrapped": type(trainer.model_wrapped).__name__, "loss": step["loss"], "grad_norm": step["grad_norm"]}


def main(model_dir: str, out_dir: str) -> None:
    shared_forwards = []
    score = shared_prompt.score_with_shared_prompt

    def counted(*args, **kwargs):
        shared_forwards.append(1)
        return score(*args, **kwargs)

    shared_prompt.score_with_shared_prompt = counted
    try:
        shared = _train(model_dir, out_dir)
    finally:
        shared_prompt.score_with_shared_prompt = score
    # pad_to_multiple_of turns the shared prompt off: each row runs its prompt, as in TRL
    separate = _train(model_dir, out_dir, pad_to_multiple_of=1)
    dump_rank(out_dir, int(os.environ.get("RANK", 0)),
              {"shared": shared, "separate": separate, "shared_forwards": len(shared_forwards)})

if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main(sys.argv[1], sys.argv[2])
    finish()
