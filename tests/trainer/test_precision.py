"""bf16 mixed precision on the CPU: a LoRA step's loss and gradients stay near fp32's; frozen weights load in bf16."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig
from transformers import AutoTokenizer

from rapo_trl.config import RAPOConfig
from rapo_trl.trainer import RAPOTrainer
from tests.helpers.fakes import EchoTool
from tests.helpers.trainers import batch_inputs, common_args, dataset, loss_and_grads, script, sevens

# Measured on the tiny model (one step: the ratio is 1, so the loss is the advantages' and equal): the LoRA
# gradients have cosine 0.99993 to fp32's and differ by 1.1% of the largest entry. A broken cast (adapters in bf16,
# a lost LoRA path) moves them by far more.
LOSS_RTOL, GRAD_RTOL, MIN_COSINE = 1e-6, 0.03, 0.9995


def _lora_step(tiny_model_dir, tmp_path, bf16: bool):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    args = RAPOConfig(**common_args(tmp_path, bf16=bf16), max_turn_tokens=32)
    trainer = RAPOTrainer(str(tiny_model_dir), sevens, args=args, train_dataset=dataset(), processing_class=tok,
                          tools=[EchoTool()], peft_config=LoraConfig(r=4, lora_alpha=8, target_modules="all-linear",
                                                                     init_lora_weights=False))
    script(trainer)
    trainer.model.train()
    return trainer, loss_and_grads(trainer, trainer._generate_and_score_completions(batch_inputs()))


def test_bf16_lora_step_is_near_fp32(tiny_model_dir, tmp_path):
    half, (loss, grads) = _lora_step(tiny_model_dir, tmp_path / "bf16", bf16=True)
    full, (full_loss, full_grads) = _lora_step(tiny_model_dir, tmp_path / "fp32", bf16=False)
    weights = {p.dtype for n, p in half.model.named_parameters() if "lora_" not in n}
    adapters = {p.dtype for n, p in half.model.named_parameters() if "lora_" in n}
    assert weights == {torch.bfloat16} and adapters == {torch.float32}  # frozen base in bf16, fp32 master weights
    assert {p.dtype for p in full.model.parameters()} == {torch.float32}
    assert full_loss != 0 and torch.allclose(loss, full_loss, rtol=LOSS_RTOL)
    assert grads.keys() == full_grads.keys() and grads
    flat, full_flat = torch.cat([g.flatten() for g in grads.values()]), torch.cat([g.flatten() for g in full_grads.values()])
    assert torch.nn.functional.cosine_similarity(flat, full_flat, dim=0) > MIN_COSINE
    assert (flat - full_flat).abs().max() <= GRAD_RTOL * full_flat.abs().max()


def test_the_callers_config_is_left_as_given(tiny_model_dir, tmp_path):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    args = RAPOConfig(**common_args(tmp_path, bf16=True), max_turn_tokens=32)
    trainer = RAPOTrainer(str(tiny_model_dir), sevens, args=args, train_dataset=dataset(), processing_class=tok,
                          tools=[EchoTool()], peft_config=LoraConfig(r=4, target_modules="all-linear"))
    assert trainer.args.model_init_kwargs == {"dtype": "bfloat16"}  # the trainer's copy loads the base in bf16
    assert args.model_init_kwargs is None and trainer.args is not args
    assert trainer.args.bf16 and trainer.args.output_dir == args.output_dir  # the rest as given


def test_an_explicit_dtype_is_kept(tiny_model_dir, tmp_path):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    args = RAPOConfig(**common_args(tmp_path, bf16=True, model_init_kwargs={"dtype": "float32"}), max_turn_tokens=32)
    trainer = RAPOTrainer(str(tiny_model_dir), sevens, args=args, train_dataset=dataset(), processing_class=tok,
                          tools=[EchoTool()], peft_config=LoraConfig(r=4, target_modules="all-linear"))
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}


@pytest.mark.parametrize("trained", [{"modules_to_save": ["lm_head"]}, {"bias": "lora_only"}, {"bias": "all"}])
def test_trained_base_weights_keep_fp32_master_weights(tiny_model_dir, tmp_path, trained):
    """PEFT upcasts only its adapter layers: a modules_to_save copy or a trained bias would stay bf16 and the optimizer
    would round every update smaller than a bf16 spacing away. Such a config loads the base in fp32, as TRL does."""
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    args = RAPOConfig(**common_args(tmp_path, bf16=True), max_turn_tokens=32)
    trainer = RAPOTrainer(str(tiny_model_dir), sevens, args=args, train_dataset=dataset(), processing_class=tok,
                          tools=[EchoTool()], peft_config=LoraConfig(r=4, target_modules="all-linear", **trained))
    trainable = {n: p.dtype for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert any("lora_" not in n for n in trainable)  # the config trains more than the adapter
    assert set(trainable.values()) == {torch.float32}, trainable
    assert trainer.args.model_init_kwargs is None
