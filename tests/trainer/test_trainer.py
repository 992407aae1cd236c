"""RAPOTrainer invariants on the tiny model (docs/design.md, docs/trl-integration.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from datasets import Dataset
from transformers import AutoTokenizer, TrainerCallback

from rapo_trl.config import RAPOConfig
from rapo_trl.question_ids import question_id_of
from rapo_trl.trainer import RAPOTrainer
from tests.helpers.fakes import EchoTool, FixedStore
from tests.helpers.trainers import (
    G,
    agentic_grpo_trainer,
    batch_inputs,
    common_args,
    loss_and_grads,
    rapo_trainer,
    script,
)


def test_no_retrieval_equals_agentic_grpo(tiny_model_dir, tmp_path):
    """p = 0 with a store: loss and gradients equal GRPOTrainer fed the same rollouts."""
    rapo = rapo_trainer(tiny_model_dir, tmp_path / "rapo", store=FixedStore(), retrieve_prob=0.0)
    script(rapo)
    rapo.model.train()
    rapo_batch = rapo._generate_and_score_completions(batch_inputs())
    rapo_loss, rapo_grads = loss_and_grads(rapo, rapo_batch)

    grpo = agentic_grpo_trainer(tiny_model_dir, tmp_path / "grpo")
    script(grpo)
    grpo.model.train()
    grpo_batch = grpo._generate_and_score_completions(batch_inputs())
    grpo_loss, grpo_grads = loss_and_grads(grpo, grpo_batch)

    assert torch.equal(rapo_batch["completion_ids"], grpo_batch["completion_ids"])
    assert torch.equal(rapo_batch["tool_mask"], grpo_batch["tool_mask"])
    assert torch.allclose(rapo_batch["advantages"], grpo_batch["advantages"])
    assert rapo_batch["advantages"].abs().sum() > 0
    assert torch.allclose(rapo_loss, grpo_loss, atol=1e-7) and rapo_loss != 0
    assert rapo_grads.keys() == grpo_grads.keys()
    for name in rapo_grads:
        assert torch.allclose(rapo_grads[name], grpo_grads[name], atol=1e-7), name


def test_the_reference_model_is_frozen(tiny_model_dir, tmp_path):
    """beta > 0 without an adapter: TRL builds a separate reference model, which no backward may reach."""
    trainer = rapo_trainer(tiny_model_dir, tmp_path, beta=0.04)
    assert trainer.ref_model is not None and trainer.ref_model is not trainer.model
    assert not any(p.requires_grad for p in trainer.ref_model.parameters())
    assert all(p.requires_grad for p in trainer.model.parameters())


def test_shaped_ratio_is_clipped_and_forced_tokens_carry_no_gradient(tiny_model_dir, tmp_path):
    m = 1.0
    # A long retrieved step (F_ret > 0.28) that still leaves the policy room to continue.
    trainer = rapo_trainer(tiny_model_dir, tmp_path, store=FixedStore("<think>" + "hint " * 30 + "</think>"),
                           retrieve_prob=1.0, num_hybrid_generations=2, importance_shaping_weight=m,
                           retrieval_advantage_weight=0.0, max_completion_length=192)
    script(trainer)
    trainer.model.train()
    batch = trainer._generate_and_score_completions(batch_inputs())
    rows = trainer.last_rollout.rows
    f_ret = torch.tensor([r.retrieved_fraction for r in rows])
    assert (f_ret[:2] > 0).all() and (f_ret[2:] == 0).all()
    assert torch.equal(batch["rapo_retrieved_fraction"], f_ret)

    mask = batch["completion_mask"] * batch["tool_mask"]
    policy_tokens = sum(sum(r.env_mask) for r in rows)
    assert int(batch["num_items_in_batch"]) == policy_tokens == int(mask.sum())

    loss, grads = loss_and_grads(trainer, batch)

    # By hand: ratio value (1 + m F) at the current policy, clipped at 1 + eps_high for A > 0,
    # dual-clipped at delta for A < 0; token mean over policy tokens only.
    model = trainer.model
    model.zero_grad()
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attn = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    logits = model(input_ids=ids, attention_mask=attn).logits[:, -batch["completion_ids"].size(1) - 1 : -1]
    logps = torch.log_softmax(logits.float(), -1).gather(-1, batch["completion_ids"].unsqueeze(-1)).squeeze(-1)
    ratio = torch.exp(logps - logps.detach()) * (1 + m * f_ret).unsqueeze(1)
    adv = batch["advantages"].unsqueeze(1)
    clipped = torch.clamp(ratio, 1 - 0.2, 1 + 0.28)
    unclipped = torch.clamp(ratio, max=3.0)
    per_token = -torch.min(unclipped * adv, clipped * adv)
    expected = (per_token * mask).sum() / mask.sum()
    expected.backward()
    assert torch.allclose(loss, expected.detach(), atol=1e-6)
    for name, param in model.named_parameters():
        if param.grad is not None:
            assert torch.allclose(grads[name], param.grad, atol=1e-6), name
    # The hybrid rows' shaped ratios lie outside the clip range, so the clip really acted on them.
    assert all((1 + m * f) > 1.28 for f in f_ret[:2])


def test_retrieval_reward_reweights_advantages(tiny_model_dir, tmp_path):
    a = 0.2
    trainer = rapo_trainer(tiny_model_dir, tmp_path, store=FixedStore(), retrieve_prob=1.0,
                           num_hybrid_generations=2, retrieval_advantage_weight=a)
    script(trainer)
    trainer.model.train()
    batch = trainer._generate_and_score_completions(batch_inputs())
    from rapo_trl.core.objective import group_normalize, trajectory_retrieval_reward

    rows = trainer.last_rollout.rows
    z = torch.tensor([trajectory_retrieval_reward((e.entropy_pre, e.entropy_post) for e in r.retrievals) for r in rows])
    assert z[0] != 0 and z[1] != 0 and z[2] == 0 and z[3] == 0
    rewards = torch.tensor([1.0, 2.0, 3.0, 0.0])
    a_acc = (rewards - rewards.mean()) / (rewards.std() + 1e-4)
    expected = a_acc * (1 + a * group_normalize(z, G, eps=1e-6))  # A_acc: TRL's eps 1e-4; A_ret: the paper's 1e-6
    assert torch.allclose(batch["advantages"], expected, atol=1e-5)
    log = trainer._metrics["train"]
    assert log["rapo/retrieval_rate"][-1] == 1.0 and log["rapo/hybrid_share"][-1] == 0.5


def test_rewards_do_not_see_retrieved_blocks(tiny_model_dir, tmp_path):
    seen = []

    def record(completions, **kwargs):
        seen.extend(c[0]["content"] for c in completions)
        return [0.0] * len(completions)

    trainer = rapo_trainer(tiny_model_dir, tmp_path, store=FixedStore("<answer>777777</answer>"), retrieve_prob=1.0,
                           num_hybrid_generations=2)
    trainer.reward_funcs = [record]
    script(trainer)
    trainer.model.train()
    trainer._generate_and_score_completions(batch_inputs())
    assert seen and not any("777777" in text or "<retrieve>" in text for text in seen)
    assert "<python>1</python>" in seen[0] and "<result>" in seen[0]


def test_two_steps_change_every_trainable_parameter_lora(tiny_model_dir, tmp_path):
    from peft import LoraConfig

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    args = RAPOConfig(**common_args(tmp_path, max_steps=2, max_completion_length=16), max_turn_tokens=8)
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": f"Q{i}"}]} for i in range(4)])

    def length_reward(completion_ids, **kwargs):
        return [float(len(c) % 5) + float(sum(c) % 3) for c in completion_ids]

    trainer = RAPOTrainer(str(tiny_model_dir), length_reward, args=args, train_dataset=ds, processing_class=tok,
                          trace_store=FixedStore(), tools=[EchoTool()],
                          peft_config=LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    trainable = {n for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    for name, param in trainer.model.named_parameters():
        changed = not torch.equal(before[name], param.detach())
        assert changed == (name in trainable), name
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))


def test_full_finetune_two_steps_change_every_parameter(tiny_model_dir, tmp_path):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    args = RAPOConfig(**common_args(tmp_path, max_steps=2, max_completion_length=16), max_turn_tokens=8)
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": f"Q{i}"}]} for i in range(4)])

    def id_reward(completion_ids, **kwargs):
        return [float(sum(c) % 7) for c in completion_ids]

    trainer = RAPOTrainer(str(tiny_model_dir), id_reward, args=args, train_dataset=ds, processing_class=tok)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    for name, param in trainer.model.named_parameters():
        assert not torch.equal(before[name], param.detach()), name


def test_resume_after_kill_matches_uninterrupted_run(tiny_model_dir, tmp_path):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": f"Q{i}"}]} for i in range(8)])

    def id_reward(completion_ids, **kwargs):
        return [float(sum(c) % 7) for c in completion_ids]

    class KillAfter(TrainerCallback):
        def __init__(self, step):
            self.step = step

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step >= self.step:
                control.should_training_stop = True

    def run(output, kill_after=None, resume=None):
        args = RAPOConfig(**common_args(output, max_steps=3, max_completion_length=16, save_strategy="steps",
                                        save_steps=1), max_turn_tokens=8, retrieve_prob=0.5)
        trainer = RAPOTrainer(str(tiny_model_dir), id_reward, args=args, train_dataset=ds, processing_class=tok,
                              trace_store=FixedStore(), tools=[EchoTool()],
                              callbacks=[KillAfter(kill_after)] if kill_after else None)
        trainer.train(resume_from_checkpoint=resume)
        step3 = [e for e in trainer.state.log_history if e.get("step") == 3 and "grad_norm" in e]
        return trainer, step3

    full, full_log = run(tmp_path / "full")
    run(tmp_path / "killed", kill_after=2)  # the process dies right after checkpoint 2
    assert (tmp_path / "killed" / "checkpoint-2" / "rapo_state_0.json").exists()
    resumed, resumed_log = run(tmp_path / "killed", resume=str(tmp_path / "killed" / "checkpoint-2"))
    # Step 3 (= k + 1) sees the same rollouts and takes the same update as in the uninterrupted run.
    assert resumed_log[0]["loss"] == pytest.approx(full_log[0]["loss"], abs=1e-7)
    assert resumed_log[0]["grad_norm"] == pytest.approx(full_log[0]["grad_norm"], rel=1e-5)
    assert resumed_log[0]["grad_norm"] > 0
    assert resumed.rollout_engine.rng.getstate() == full.rollout_engine.rng.getstate()
    for (name, a), (_, b) in zip(full.model.named_parameters(), resumed.model.named_parameters()):
        assert torch.allclose(a, b, atol=1e-6), name


def test_checkpoints_hold_rapo_state_and_a_resume_without_it_warns(tiny_model_dir, tmp_path, caplog, monkeypatch):
    import json
    import logging

    import transformers.trainer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": f"Q{i}"}]} for i in range(8)])

    def id_reward(completion_ids, **kwargs):
        return [float(sum(c) % 7) for c in completion_ids]

    class DescribedStore(FixedStore):
        def describe(self):
            return {"location": "fixed", "collection": "traces", "records": 1}

    class StopAfter(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            control.should_training_stop = state.global_step >= 1

    # What rotation (and the hub push before it) see: each checkpoint must already hold RAPO's state.
    seen_at_rotation = []
    rotate = transformers.trainer.rotate_checkpoints

    def spying_rotate(output_dir, **kwargs):
        for folder in sorted(Path(output_dir).glob("checkpoint-*")):
            seen_at_rotation.append((folder.name, (folder / "rapo_state_0.json").is_file()))
        return rotate(output_dir=output_dir, **kwargs)

    monkeypatch.setattr(transformers.trainer, "rotate_checkpoints", spying_rotate)

    def run(callbacks=None, resume=None):
        args = RAPOConfig(**common_args(tmp_path, max_steps=2, max_completion_length=16, save_strategy="steps",
                                        save_steps=1), max_turn_tokens=8, retrieve_prob=0.5)
        trainer = RAPOTrainer(str(tiny_model_dir), id_reward, args=args, train_dataset=ds, processing_class=tok,
                              trace_store=DescribedStore(), tools=[EchoTool()], callbacks=callbacks)
        trainer.train(resume_from_checkpoint=resume)
        return trainer

    run(callbacks=[StopAfter()])  # "killed" after checkpoint 1
    checkpoint = tmp_path / "checkpoint-1"
    assert seen_at_rotation == [("checkpoint-1", True)]
    state = json.loads((checkpoint / "rapo_state_0.json").read_text())
    assert state["store"] == {"location": "fixed", "collection": "traces", "records": 1}
    assert isinstance(state["engine"]["rng"], list)
    assert not [p.name for p in checkpoint.iterdir() if p.name.endswith(".tmp")]  # written atomically

    (checkpoint / "rapo_state_0.json").unlink()  # a checkpoint without RAPO's rollout state
    with caplog.at_level(logging.WARNING, logger="rapo_trl.trainer"):
        resumed = run(resume=str(checkpoint))
    warnings = [r.getMessage() for r in caplog.records if r.name == "rapo_trl.trainer" and r.levelno == logging.WARNING
                and "rapo_state_0.json" in r.getMessage()]
    assert len(warnings) == 1, caplog.text
    assert "checkpoint-1 has no rapo_state_0.json" in warnings[0] and "will differ" in warnings[0]
    assert resumed.state.global_step == 2  # training still completes
    assert seen_at_rotation[-1] == ("checkpoint-2", True)
    assert json.loads((tmp_path / "checkpoint-2" / "rapo_state_0.json").read_text())["engine"]["rng"]


def test_no_retrieval_in_evaluation(tiny_model_dir, tmp_path):
    store = FixedStore()
    trainer = rapo_trainer(tiny_model_dir, tmp_path, store=store, retrieve_prob=1.0, num_hybrid_generations=G)
    script(trainer)
    trainer.model.eval()
    rows = trainer.roll_out_prompts([row["prompt"] for row in batch_inputs()]).rows
    assert store.queries == [] and [len(r.retrievals) for r in rows] == [0] * G
    assert not any(r.is_hybrid for r in rows)
    # What the evaluation logs says so: p was 0 (it was the training p, 1.0), and no training store-error count.
    logged = trainer._metrics["eval"]
    assert logged["rapo/retrieve_prob"] == [0.0] and logged["rapo/hybrid_share"] == [0.0]
    assert "rapo/store_errors" not in logged


def test_model_card_cites_rapo(tiny_model_dir, tmp_path):
    trainer = rapo_trainer(tiny_model_dir, tmp_path)
    trainer.create_model_card(model_name="tiny-rapo")
    card = (tmp_path / "README.md").read_text()
    assert "2603.03078" in card and "RAPO" in card and "rapo" in card


class RecordingStore(FixedStore):
    def __init__(self):
        super().__init__()
        self.added = []

    def add_policy_trajectories(self, prompts, completions, rewards, question_ids, min_reward, keep_top_k):
        self.added.append((prompts, completions, rewards, question_ids))
        return len(completions)


def test_store_growth_adds_each_groups_best_policy_trajectory(tiny_model_dir, tmp_path):
    store = RecordingStore()
    trainer = rapo_trainer(tiny_model_dir, tmp_path, store=store, retrieve_prob=1.0, num_hybrid_generations=2,
                           store_growth_min_reward=2.0)
    script(trainer)
    trainer.model.train()
    trainer._generate_and_score_completions(batch_inputs())
    ((prompts, completions, rewards, qids),) = store.added
    assert rewards == [3.0]  # row 2 ("777") is the group's best and clears the threshold
    assert "<answer>777</answer>" in completions[0] and "<retrieve>" not in completions[0]
    # a row without an id is stored under its question's, as to_rapo_rows names it
    assert prompts[0] == batch_inputs()[0]["prompt"] and qids[0] == question_id_of("Compute 0")
