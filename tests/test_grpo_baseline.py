"""The baseline later equivalence tests rely on: a stock TRL GRPOTrainer step with LoRA on the tiny model."""

from __future__ import annotations

import torch
from datasets import Dataset
from peft import LoraConfig
from transformers import AutoTokenizer
from trl import GRPOConfig, GRPOTrainer


def test_grpo_lora_step_changes_adapters_only(tiny_model_dir, tmp_path):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": f"Say {i}"}]} for i in range(4)])

    def token_sum_reward(completion_ids, **kwargs):
        return [float(sum(c) % 11) for c in completion_ids]

    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", max_steps=2,
                      per_device_train_batch_size=4, num_generations=4, max_completion_length=12,
                      learning_rate=0.1, save_strategy="no", seed=0)
    trainer = GRPOTrainer(str(tiny_model_dir), token_sum_reward, args=args, train_dataset=ds, processing_class=tok,
                          peft_config=LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    adapters = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert adapters and all("lora_" in n for n in adapters)
    for name, param in trainer.model.named_parameters():
        assert (not torch.equal(before[name], param.detach())) == (name in adapters), name
