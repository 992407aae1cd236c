"""Scenarios of tests/test_multiprocess.py, run under `torchrun --nproc_per_node 2` (by `multiprocess_scenarios.py`,
or alone): `trainer.train()` itself, so the loss runs on the model as accelerate wraps it for several processes
(DistributedDataParallel).

- ``shared`` (the default): one step with the shared-prompt forward (gradient checkpointing off: it turns that
  forward off), one with each row running its prompt, from the same start and seed. Each rank dumps both steps'
  logged loss and grad norm, and how many shared-prompt forwards ran.
- ``lora_retrieval``: a LoRA run retrieving from a real embedded store that both processes read, only for the groups
  whose on-policy rows failed, with the retrieved-token loss. Each rank dumps its log and its adapter's weights."""

import os
import sys
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from rapo_trl.config import RAPOConfig  # noqa: E402
from rapo_trl.embeddings import HashingEmbedder  # noqa: E402
from rapo_trl.store import StoreConfig, TraceStore  # noqa: E402
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


def _open_store(path) -> TraceStore:
    return TraceStore(path, collection="steps", embedder=HashingEmbedder(64, name="h64"),
                      config=StoreConfig(show_progress=False))


def _fill_store(path) -> None:
    """One trajectory that succeeded (answer 7) and one that failed, per question: a first step to retrieve."""
    with _open_store(path) as store:
        trajectories = [f"<think>seven</think>\n<python>print({a})</python>\n<result>\n{a}\n</result>\n<answer>{a}</answer>"
                        for _ in range(4) for a in (7, 77)]
        store.add_trajectories(trajectories, [float(i % 2 == 0) for i in range(8)], [f"q{i // 2}" for i in range(8)],
                               prompts=[f"Compute {i // 2}" for i in range(8)], keep_top_k=None)


def checksum_reward(completions, **kwargs):
    """1 for about a quarter of the texts (a checksum of what the policy wrote): groups fail and succeed by chance."""
    return [float(zlib.crc32(c[0]["content"].encode()) % 4 == 0) for c in completions]


def lora_retrieval(model_dir: str, out_dir: str) -> dict:
    """Two steps of LoRA training that retrieve (p 1, at the completion's start) for the groups whose on-policy rows
    all failed, and learn the retrieved steps' tokens; the store is an embedded one in one folder that both
    processes read (rank 0 fills it first, alone: an embedded store has one writer)."""
    from peft import LoraConfig

    store_dir = Path(out_dir, "store")
    if int(os.environ.get("RANK", 0)) == 0:
        _fill_store(store_dir)
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
    args = RAPOConfig(
        output_dir=out_dir, use_cpu=True, bf16=False, report_to="none", per_device_train_batch_size=4,
        num_generations=4, max_completion_length=80, max_turn_tokens=16, seed=0, save_strategy="no", max_steps=2,
        logging_steps=1, learning_rate=1e-3, retrieve_prob=1.0, retrieve_at=["start"],
        retrieve_failed_groups_max_reward=0.0, retrieved_token_loss_weight=0.5,
    )
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": f"Compute {i}"}]} for i in range(4)])
    trainer = RAPOTrainer(AutoModelForCausalLM.from_pretrained(model_dir), checksum_reward, args=args,
                          train_dataset=data, processing_class=AutoTokenizer.from_pretrained(model_dir),
                          tools=[EchoTool()], trace_store=_open_store(store_dir),
                          peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                 task_type="CAUSAL_LM"))
    trainer.train()
    timing = ("time", "runtime", "per_second")
    log = [{k: v for k, v in entry.items() if not any(t in k for t in timing)} for entry in trainer.state.log_history]
    lora_b = [p.abs().sum().item() for n, p in trainer.model.named_parameters() if "lora_B" in n]
    return {"wrapped": type(trainer.model_wrapped).__name__, "log": log, "lora_b": lora_b}


def main(model_dir: str, out_dir: str, case: str = "shared") -> None:
    if case == "lora_retrieval":
        dump_rank(out_dir, int(os.environ.get("RANK", 0)), lora_retrieval(model_dir, out_dir))
        return
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
    main(*sys.argv[1:])
    finish()
