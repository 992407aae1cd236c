"""RAPOTrainer's loss and gradients equal ``reference_step``'s on the same rollout rows: the trainer is the paper's
step, spread over TRL's hooks (beside tests/trainer/test_trainer.py's equality with GRPOTrainer at p = 0). The
reference step normalises the weighted reward per group, TRL's ``scale_rewards="group"``: the trainer refuses TRL's other scales
while it retrieves, and keeps them for GRPO without retrieval."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rapo_trl.config import RAPOConfig
from rapo_trl.core import Coefficients, reference_step
from rapo_trl.rewards.view import policy_view
from rapo_trl.trainer.checks import check_reward_scale
from tests.helpers.fakes import FixedStore
from tests.helpers.trainers import batch_inputs, common_args, loss_and_grads, rapo_trainer, script

LONG_STEP = "<think>" + "hint " * 30 + "</think>"  # F_ret > 0.28: with m = 1 the clip binds
STORED = "<think>seven</think>\n<python>print(7)</python>\n<result>\n7\n</result>\n"  # a hybrid row beats its group


@pytest.mark.parametrize("stored, settings", [
    (LONG_STEP, dict(importance_shaping_weight=1.0, max_completion_length=192)),
    (STORED, dict(retrieved_token_loss_weight=0.5)),
    (STORED, dict(advantage_baseline="on_policy", retrieved_token_loss_weight=0.5, retrieved_token_shaping=None)),
    (STORED, dict(retrieved_token_loss_weight=0.5, retrieved_token_credit="stored_reward")),
], ids=["shaped-and-clipped", "retrieved-token-loss", "on-policy-baseline", "stored-reward-credit"])
def test_trainer_loss_and_gradients_equal_the_reference_step(tiny_model_dir, tmp_path, stored, settings):
    trainer = rapo_trainer(tiny_model_dir, tmp_path, store=FixedStore(stored), retrieve_prob=1.0,
                           num_hybrid_generations=2, **settings)
    script(trainer)
    trainer.model.train()
    batch = trainer._generate_and_score_completions(batch_inputs())
    loss, grads = loss_and_grads(trainer, batch)
    rows = trainer.last_rollout.rows

    tokenizer = trainer.processing_class

    def sevens(row):
        return float(tokenizer.decode(policy_view(row, False), skip_special_tokens=True).count("7"))

    model = trainer.model
    model.zero_grad()
    reference = reference_step(model, rows, sevens, Coefficients.from_config(trainer.args))
    reference.loss.backward()

    assert reference.retrieval_rewards[:2].ne(0).all() and reference.retrieved_fractions[:2].gt(0).all()
    assert torch.allclose(reference.rewards, trainer.last_rollout.rewards)
    assert torch.allclose(reference.advantages, batch["advantages"], atol=1e-6)
    assert torch.allclose(reference.loss.detach(), loss, atol=1e-6) and loss != 0
    for name, param in model.named_parameters():
        if param.grad is not None:
            assert torch.allclose(param.grad, grads[name], atol=1e-6), name
    assert grads.keys() == {name for name, param in model.named_parameters() if param.grad is not None}
    if trainer.args.advantage_baseline != "group":  # the baseline really moved the advantages away from GRPO's
        group = dataclasses.replace(Coefficients.from_config(trainer.args), advantage_baseline="group")
        grpo = reference_step(model, rows, sevens, group)
        assert not torch.allclose(grpo.advantages, reference.advantages, atol=1e-3)
    if trainer.args.retrieved_token_loss_weight:
        assert trainer._metrics["train"]["rapo/retrieved_token_loss"][-1] != 0  # the extra term really acted


def test_the_coefficients_default_to_the_configs_defaults_and_follow_its_fields(tmp_path):
    assert Coefficients.from_config(RAPOConfig(output_dir=str(tmp_path), use_cpu=True)) == Coefficients()
    args = RAPOConfig(output_dir=str(tmp_path), use_cpu=True, epsilon=0.1, delta=None, advantage_baseline="on_policy",
                      retrieved_token_credit="stored_reward")
    assert Coefficients.from_config(args) == Coefficients(epsilon_low=0.1, delta=None, advantage_baseline="on_policy",
                                                          retrieved_token_credit="stored_reward")


@pytest.mark.parametrize("scale", ["batch", "none", False])
def test_the_trainer_refuses_other_reward_scales_while_it_retrieves(tiny_model_dir, tmp_path, scale):
    with pytest.raises(ValueError, match=r"scale_rewards='(batch|none)' is for GRPO without retrieval: .* set "
                                         r"scale_rewards='group'\.$"):
        rapo_trainer(tiny_model_dir, tmp_path, store=FixedStore(STORED), retrieve_prob=1.0, num_hybrid_generations=2,
                     scale_rewards=scale)


@pytest.mark.parametrize("store, settings", [
    (None, {}),  # no store: GRPO
    (FixedStore(STORED), dict(retrieve_prob=0.0)),
    (FixedStore(STORED), dict(num_hybrid_generations=0)),
], ids=["no-store", "p-0", "no-hybrid-rows"])
def test_grpo_without_retrieval_keeps_every_reward_scale(tmp_path, store, settings):
    for scale in ("batch", "none", "group"):
        check_reward_scale(RAPOConfig(**common_args(tmp_path, scale_rewards=scale, **settings)), store)


def test_the_trainer_refuses_normalize_then_sum_while_it_retrieves(tiny_model_dir, tmp_path):
    with pytest.raises(ValueError, match=r"^multi_objective_aggregation='normalize_then_sum' is for GRPO without "
                                         r"retrieval: .* set multi_objective_aggregation='sum_then_normalize'\.$"):
        rapo_trainer(tiny_model_dir, tmp_path, store=FixedStore(STORED), retrieve_prob=1.0, num_hybrid_generations=2,
                     multi_objective_aggregation="normalize_then_sum")


def test_grpo_without_retrieval_keeps_normalize_then_sum(tmp_path):
    args = RAPOConfig(**common_args(tmp_path, retrieve_prob=0.0, multi_objective_aggregation="normalize_then_sum"))
    check_reward_scale(args, FixedStore(STORED))


def test_a_trainer_without_a_store_takes_batch_scaling(tiny_model_dir, tmp_path):
    assert rapo_trainer(tiny_model_dir, tmp_path, scale_rewards="batch").args.scale_rewards == "batch"


def test_a_p_annealed_up_from_0_retrieves_too(tmp_path):
    args = RAPOConfig(**common_args(tmp_path, scale_rewards="none", retrieve_prob=0.0, retrieve_prob_final=0.5))
    with pytest.raises(ValueError, match="scale_rewards='none' is for GRPO without retrieval"):
        check_reward_scale(args, FixedStore(STORED))
