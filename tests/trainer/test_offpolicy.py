"""The paper recipe's off-policy path: two optimizer updates per generation batch, the shaped ratio on
stored old log-probs (and under vLLM's importance-sampling correction), and the dual clip (docs/design.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from datasets import Dataset
from transformers import AutoTokenizer

from rapo_trl.cli import parse_recipe
from rapo_trl.config import RAPOConfig
from rapo_trl.trainer import RAPOTrainer
from tests.helpers.fakes import EchoTool, FixedStore
from tests.helpers.trainers import (
    SCRIPTS,
    batch_inputs,
    common_args,
    loss_and_grads,
    rapo_trainer,
    script,
    sevens,
)
from tests.trainer.test_dropin import _perturb

PAPER = Path(__file__).parents[2] / "configs" / "paper_gpu.yaml"
LONG_STEP = "<think>" + "hint " * 30 + "</think>"  # retrieved: F_ret ~ 0.7 on the hybrid rows


def by_hand(trainer, batch, shift, delta=3.0, is_ratio=None):
    """DAPO loss and gradients written out: r_hat = exp(logp - (old - shift)), PPO clip 0.2/0.28, dual clip
    ``delta`` for A < 0, token sum over policy tokens / TRL's DAPO normaliser."""
    model = trainer.model
    model.zero_grad()
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attn = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    logps, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, attn, batch["completion_ids"].size(1))
    old = batch.get("old_per_token_logps")
    old = logps.detach() if old is None else old
    ratio = torch.exp(logps - (old - shift.unsqueeze(1)))
    adv = batch["advantages"].unsqueeze(1)
    clipped = torch.clamp(ratio, 1 - 0.2, 1 + 0.28)
    unclipped = ratio if delta is None else torch.clamp(ratio, max=delta)
    per_token = -torch.min(unclipped * adv, clipped * adv)
    if is_ratio is not None:
        per_token = per_token * is_ratio
    mask = batch["completion_mask"] * batch["tool_mask"]
    normalizer = batch["num_items_in_batch"] * trainer.current_gradient_accumulation_steps
    normalizer = normalizer / trainer.args.steps_per_generation
    loss = (per_token * mask).sum() / normalizer
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), grads, ratio.detach()


def assert_same(loss, grads, expected_loss, expected_grads):
    assert torch.allclose(loss, expected_loss, atol=1e-6), (loss, expected_loss)
    assert grads.keys() == expected_grads.keys()
    for name in grads:
        assert torch.allclose(grads[name], expected_grads[name], atol=1e-6), name


def off_policy_batch(tiny_model_dir, tmp_path, m):
    """A generation batch of two groups taken in two updates (steps_per_generation 2, no accumulation), so
    TRL stores old log-probs; then the weights move, as after the first update."""
    trainer = rapo_trainer(tiny_model_dir, tmp_path, store=FixedStore(LONG_STEP), retrieve_prob=1.0,
                           num_hybrid_generations=2, importance_shaping_weight=m, retrieval_advantage_weight=0.0,
                           max_completion_length=192, steps_per_generation=2)
    script(trainer, SCRIPTS * 2)
    trainer.model.train()
    batch = trainer._generate_and_score_completions(batch_inputs(2 * len(SCRIPTS)))
    f_ret = torch.tensor([r.retrieved_fraction for r in trainer.last_rollout.rows])
    assert "old_per_token_logps" in batch and (f_ret[[0, 1, 4, 5]] > 0.3).all()
    _perturb(trainer.model, scale=0.02)
    return trainer, batch, torch.log1p(m * f_ret)


def test_shaped_ratio_on_stored_old_logprobs(tiny_model_dir, tmp_path):
    trainer, batch, shift = off_policy_batch(tiny_model_dir, tmp_path, m=0.2)
    stored = batch["old_per_token_logps"].clone()
    loss, grads = loss_and_grads(trainer, batch)
    expected_loss, expected_grads, ratio = by_hand(trainer, batch, shift)
    assert_same(loss, grads, expected_loss, expected_grads)
    # Teeth: the weights moved (r != 1), and the opposite shift gives another loss.
    mask = (batch["completion_mask"] * batch["tool_mask"]).bool()
    assert (ratio / torch.exp(shift).unsqueeze(1))[mask].sub(1).abs().max() > 1e-3
    flipped, _, _ = by_hand(trainer, batch, -shift)
    assert not torch.allclose(loss, flipped, atol=1e-4)
    assert torch.equal(batch["old_per_token_logps"], stored)  # the buffered batch is reused unshifted


def test_shaped_ratio_under_vllm_importance_sampling_correction(tiny_model_dir, tmp_path):
    """With vLLM, TRL always stores old log-probs and weights each token by its IS ratio; the shift
    still acts on pi / pi_old only (the IS ratio is pi_old / pi_vllm, untouched)."""
    trainer, batch, shift = off_policy_batch(tiny_model_dir, tmp_path, m=0.2)
    generator = torch.Generator().manual_seed(1)
    batch["importance_sampling_ratio"] = 0.5 + torch.rand(batch["completion_ids"].shape, generator=generator)
    # Only the loss reads these two flags; the rollouts above ran on the transformers backend.
    trainer.use_vllm, trainer.vllm_importance_sampling_correction = True, True
    loss, grads = loss_and_grads(trainer, batch)
    trainer.use_vllm = False
    expected_loss, expected_grads, _ = by_hand(trainer, batch, shift, is_ratio=batch["importance_sampling_ratio"])
    assert_same(loss, grads, expected_loss, expected_grads)
    flipped, _, _ = by_hand(trainer, batch, -shift, is_ratio=batch["importance_sampling_ratio"])
    without_is, _, _ = by_hand(trainer, batch, shift)
    assert not torch.allclose(loss, flipped, atol=1e-4) and not torch.allclose(loss, without_is, atol=1e-4)


def test_dual_clip_binds_for_negative_advantages(tiny_model_dir, tmp_path):
    """m = 5 makes a hybrid row's shaped ratio ~4.5 > delta = 3; row 0 has a negative advantage, so its
    tokens' loss is capped at -3 A and they carry no gradient."""
    trainer = rapo_trainer(tiny_model_dir, tmp_path, store=FixedStore(LONG_STEP), retrieve_prob=1.0,
                           num_hybrid_generations=2, importance_shaping_weight=5.0, retrieval_advantage_weight=0.0,
                           max_completion_length=192)
    script(trainer)
    trainer.model.train()
    batch = trainer._generate_and_score_completions(batch_inputs())
    shift = torch.log1p(5.0 * batch["rapo_retrieved_fraction"])
    loss, grads = loss_and_grads(trainer, batch)
    expected_loss, expected_grads, ratio = by_hand(trainer, batch, shift, delta=3.0)
    assert_same(loss, grads, expected_loss, expected_grads)

    mask = (batch["completion_mask"] * batch["tool_mask"]).bool()
    binds = (ratio > 3.0) & (batch["advantages"] < 0).unsqueeze(1) & mask
    assert binds[0].any()  # the dual clip really acts, on row 0
    no_dual_clip, _, _ = by_hand(trainer, batch, shift, delta=None)
    assert not torch.allclose(loss, no_dual_clip, atol=1e-4)
    # Row 0's loss is -3 A per policy token: no gradient flows from it.
    trainer.model.zero_grad()
    row0 = {k: (v[:1] if isinstance(v, torch.Tensor) and v.dim() and v.size(0) == len(SCRIPTS) else v)
            for k, v in batch.items()}
    row0_loss, row0_grads = loss_and_grads(trainer, row0)
    adv0 = batch["advantages"][0]
    assert row0_loss.item() == pytest.approx((-3.0 * adv0 * mask[0].sum() / batch["num_items_in_batch"]).item(),
                                             rel=1e-5)
    assert all(g.abs().max() == 0 for g in row0_grads.values())


def test_paper_recipe_takes_two_optimizer_updates_per_generation_batch(tiny_model_dir, tmp_path):
    data = tmp_path / "train.jsonl"  # the recipe's data files are the user's; any file lets it parse
    data.write_text('{"question": "1 + 1?", "answer": "2"}\n')
    _, recipe, _ = parse_recipe("train", ["--config", str(PAPER), "--bf16", "false", "--use_cpu", "true",
                                          "--use_vllm", "false", "--output_dir", str(tmp_path / "parsed"),
                                          "--dataset_path", str(data), "--eval_dataset_path", str(data)])
    ga, spg, per_device = (recipe.gradient_accumulation_steps, recipe.steps_per_generation,
                           recipe.per_device_train_batch_size)
    assert spg == 2 * ga
    # On 8 GPUs: 16 prompts x 16 rollouts per update, 32 x 16 per generation batch (the paper's numbers).
    assert per_device * ga * 8 == 16 * recipe.num_generations
    assert per_device * spg * 8 == 32 * recipe.num_generations

    # The same geometry (gradient_accumulation_steps, steps_per_generation) on the tiny model, with hybrid
    # rollouts that retrieve: count rollouts and updates, and look at what each micro-batch's loss sees.
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": f"Compute {i}"}]} for i in range(8)])
    args = RAPOConfig(**common_args(tmp_path, max_steps=2, max_completion_length=192, gradient_accumulation_steps=ga,
                                    steps_per_generation=spg), max_turn_tokens=32, retrieve_prob=1.0)
    trainer = RAPOTrainer(str(tiny_model_dir), sevens, args=args, train_dataset=ds, processing_class=tok,
                          trace_store=FixedStore(LONG_STEP), tools=[EchoTool()])
    rows_per_generation = args.per_device_train_batch_size * spg
    script(trainer, SCRIPTS * (rows_per_generation // len(SCRIPTS)))
    rollouts, micro_batches = [], []
    rollout, compute_loss = trainer.rollout_func, trainer._compute_loss

    def counting_rollout(prompts, _trainer):
        rollouts.append(len(prompts))
        return rollout(prompts, _trainer)

    def recording_loss(model, inputs):
        micro_batches.append((inputs.get("old_per_token_logps") is not None,
                              bool((inputs["rapo_retrieved_fraction"] != 0).any())))
        return compute_loss(model, inputs)

    trainer.rollout_func, trainer._compute_loss = counting_rollout, recording_loss
    trainer.train()
    assert trainer.state.global_step == 2 and rollouts == [rows_per_generation]  # one generation, two updates
    assert len(micro_batches) == spg and all(stored for stored, _ in micro_batches)  # old log-probs stored
    assert any(shifted for _, shifted in micro_batches)  # and the shaped ratio acts on them
    clip = [e["clip_ratio/region_mean"] for e in trainer.state.log_history if "clip_ratio/region_mean" in e]
    assert clip[0] == 0 and clip[1] > 0  # the second update is off-policy and the clip engages
