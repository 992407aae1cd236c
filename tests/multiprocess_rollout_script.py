"""A scenario of tests/test_multiprocess.py, run under `torchrun --nproc_per_node 2` (by `multiprocess_scenarios.py`,
or alone): one RAPO scoring pass where a group of 4 rollouts straddles the two processes. Each rank dumps what it
computed."""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))

from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from rapo_trl.config import RAPOConfig  # noqa: E402
from rapo_trl.core.objective import trajectory_retrieval_reward  # noqa: E402
from rapo_trl.trainer import RAPOTrainer  # noqa: E402
from tests.helpers.fakes import EchoTool, FixedStore  # noqa: E402
from tests.helpers.multiprocess import dump_rank, finish  # noqa: E402
from tests.helpers.scripted import ScriptedGenerate  # noqa: E402
from tests.helpers.trainers import SCRIPTS, dataset, sevens  # noqa: E402


def main(model_dir: str, out_dir: str) -> None:
    args = RAPOConfig(
        output_dir=out_dir, use_cpu=True, bf16=False, report_to="none", per_device_train_batch_size=2,
        num_generations=4, num_hybrid_generations=2, retrieve_prob=1.0, max_completion_length=96,
        max_turn_tokens=32, seed=0, save_strategy="no",
    )
    tok = AutoTokenizer.from_pretrained(model_dir)
    trainer = RAPOTrainer(AutoModelForCausalLM.from_pretrained(model_dir), sevens, args=args,
                          train_dataset=dataset(), processing_class=tok, trace_store=FixedStore(), tools=[EchoTool()])
    rank = trainer.accelerator.process_index
    model = trainer.accelerator.unwrap_model(trainer.model)
    mine = SCRIPTS[2 * rank : 2 * rank + 2]  # global rows 2*rank, 2*rank+1
    model.generate = ScriptedGenerate(tok, [([], [t for t in turns]) for turns in mine], model.config.vocab_size)
    trainer.model.train()
    batch = trainer._generate_and_score_completions([dict(row) for row in dataset()] * 2)
    rows = trainer.last_rollout.rows
    dump = {
        "hybrid": [r.is_hybrid for r in rows],
        "z": [trajectory_retrieval_reward((e.entropy_pre, e.entropy_post) for e in r.retrievals) for r in rows],
        "advantages": batch["advantages"].tolist(),
        "f_ret_batch": batch["rapo_retrieved_fraction"].tolist(),
        "f_ret": [r.retrieved_fraction for r in rows],
        "hybrid_share": trainer._metrics["train"]["rapo/hybrid_share"][-1],
        "seconds": {name: trainer._metrics["train"][name][-1]
                    for name in ("rapo/time_generate", "rapo/time_tools", "rapo/time_retrieval")},
        "by_retrieval": {name: trainer._metrics["train"][name][-1]
                         for name in ("rapo/reward_hybrid_retrieved", "rapo/reward_on_policy")
                         if name in trainer._metrics["train"]},
    }
    dump_rank(out_dir, rank, dump)

if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main(sys.argv[1], sys.argv[2])
    finish()
