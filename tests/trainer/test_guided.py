"""Guided retrieval options in the trainer: retrieval only where the group's on-policy rollouts failed, and a loss
on the retrieved steps' own tokens of rollouts with a positive advantage or of stored steps that succeeded."""

from __future__ import annotations

import math

import pytest
import torch

from rapo_trl import RAPOConfig
from rapo_trl.core.objective import retrieved_token_loss, retrieved_token_weights
from rapo_trl.core.rows import RetrievalEvent, RolloutRow
from rapo_trl.trainer import trainer as trainer_module
from rapo_trl.trainer.loss_terms import RETRIEVED_WEIGHT_KEY
from tests.helpers.fakes import FixedStore
from tests.helpers.scripted import Turn
from tests.helpers.trainers import SCRIPTS, batch_inputs, loss_and_grads, rapo_trainer, script

STORED = "<think>seven</think>\n<python>print(7)</python>\n<result>\n7\n</result>\n"
NAN = float("nan")


def test_retrieved_token_weights_only_on_step_tokens_of_rows_above_the_group_mean():
    def row(spans):
        return RolloutRow(prompt_ids=[1], completion_ids=[0] * 12, retrievals=[
            RetrievalEvent(after_step=0, start=a - 1, end=b + 1, is_fallback=False, record_id=None, reward=1.0,
                           similarity=1.0, step_tokens=(a, b)) for a, b in spans])

    rows = [row([(2, 5)]), row([(1, 3), (6, 9)]), row([(2, 5)]), row([])]
    weights = retrieved_token_weights(rows, torch.tensor([0.5, 2.0, -1.0, 3.0]), weight=0.1, width=10)
    assert weights[0].tolist() == pytest.approx([0, 0, 0.05, 0.05, 0.05, 0, 0, 0, 0, 0])
    assert weights[1].tolist() == pytest.approx([0, 0.2, 0.2, 0, 0, 0, 0.2, 0.2, 0.2, 0])
    assert not weights[2].any() and not weights[3].any()  # below the mean; no retrieval


def test_stored_reward_credit_teaches_every_shown_stored_step_that_succeeded_whatever_its_row_scored():
    def row(*events):
        return RolloutRow(prompt_ids=[1], completion_ids=[0] * 12, retrievals=[
            RetrievalEvent(after_step=0, start=a - 1, end=b + 1, is_fallback=reward is None, record_id=None,
                           reward=reward, similarity=1.0, step_tokens=(a, b) if reward is not None else None)
            for a, b, reward in events])

    rows = [row((2, 5, 1.0)), row((1, 3, 0.5), (6, 9, 0.0)), row((2, 5, 1.0)), row(), row((2, 5, None))]
    advantages = torch.tensor([0.5, 2.0, -1.0, 3.0, 1.0])
    weights = retrieved_token_weights(rows, advantages, weight=2.0, width=10, credit="stored_reward")
    assert weights[0].tolist() == pytest.approx([0, 0, 2, 2, 2, 0, 0, 0, 0, 0])
    assert weights[1].tolist() == pytest.approx([0, 1, 1, 0, 0, 0, 0, 0, 0, 0])  # a stored failure teaches nothing
    assert weights[2].tolist() == weights[0].tolist()  # its row fell below the group mean: the store vouches
    assert not weights[3].any() and not weights[4].any()  # no retrieval; the fallback text
    by_advantage = retrieved_token_weights(rows, advantages, weight=2.0, width=10)
    assert not by_advantage[2].any() and by_advantage[0].tolist() == pytest.approx((weights[0] * 0.5).tolist())
    with pytest.raises(ValueError, match=r"retrieved_token_credit must be one of \('advantage', 'stored_reward'\)"):
        retrieved_token_weights(rows, advantages, weight=2.0, width=10, credit="always")


@pytest.mark.parametrize("shaping", [0.1, None])
def test_retrieved_token_loss_value_and_gradient(shaping):
    logps = torch.log(torch.tensor([[0.5, 0.01, 0.9]])).requires_grad_()
    weights = torch.tensor([[0.0, 2.0, 1.0]])
    loss = retrieved_token_loss(logps, weights, shaping, normalizer=4.0)
    loss.backward()
    p = torch.tensor([0.5, 0.01, 0.9])
    if shaping is None:
        expected, grad = -(2 * math.log(0.01) + math.log(0.9)) / 4, -weights[0] / 4
    else:  # d/dlog p of p / (p + g) = g p / (p + g)^2
        expected = -(2 * 0.01 / 0.11 + 0.9 / 1.0) / 4
        grad = -weights[0] * shaping * p / (p + shaping) ** 2 / 4
    assert loss.item() == pytest.approx(expected)
    assert logps.grad[0].tolist() == pytest.approx(grad.tolist())


def test_config_checks():
    def config(**kwargs):
        return RAPOConfig(output_dir="/tmp/x", use_cpu=True, bf16=False, num_generations=4,
                          **{"per_device_train_batch_size": 4, **kwargs})

    assert config().retrieve_at == ["tool_step"] and config().retrieve_failed_groups_max_reward is None
    assert config(retrieve_at="plan").retrieve_at == ["plan"]  # a YAML scalar names one boundary
    assert config(retrieve_at=["plan", "tool_step"]).retrieve_at == ["plan", "tool_step"]
    assert config(retrieve_at="first_tool_step").retrieve_at == ["first_tool_step"]
    assert config(retrieve_at=["start", "tool_step"], retrieved_step_as_own=True).retrieve_at == ["start", "tool_step"]
    for bad, match in ((dict(retrieve_at=["later"]), "retrieve_at takes one or more of"),
                       (dict(retrieve_at=["group_failed"]), "retrieve_at takes"),
                       (dict(retrieve_failed_groups_max_reward=0.0, num_hybrid_generations=4), "on-policy"),
                       (dict(retrieve_failed_groups_max_reward=0.0, dynamic_sampling_max_rounds=2),
                        "dynamic_sampling_max_rounds"),
                       (dict(retrieved_token_loss_weight=-1.0), "retrieved_token_loss_weight"),
                       (dict(retrieved_token_shaping=0.0), "retrieved_token_shaping"),
                       (dict(retrieved_token_credit="row"), "retrieved_token_credit must be one of"),
                       (dict(retrieve_at=["plan", "tool_step"], retrieved_step_as_own=True),
                        r"retrieved_step_as_own .* retrieve_at must be among")):
        with pytest.raises(ValueError, match=match):
            config(**bad)


@pytest.mark.parametrize("threshold, guided", [(2.0, False), (3.0, True)])
def test_group_failed_retrieves_only_when_the_on_policy_rows_failed(tiny_model_dir, tmp_path, threshold, guided):
    store = FixedStore()
    trainer = rapo_trainer(tiny_model_dir, tmp_path, store=store, retrieve_prob=1.0,
                           retrieve_failed_groups_max_reward=threshold)
    # Every row rolls out on-policy in one engine call (scripts 0-3 in row order); the on-policy rows 2-3 score 3 and
    # 0 (the "7"s of scripts 2 and 3). Only a failed group's hybrid rows 0-1 roll out again, retrieving (scripts 4-5).
    again = [[Turn("<python>4</python>", 8), Turn("<answer>7777</answer>", 2), Turn("<|im_end|>")],
             [Turn("<python>5</python>", 8), Turn("<answer>77777</answer>", 2), Turn("<|im_end|>")]]
    script(trainer, SCRIPTS + again)
    calls = []
    roll_out = trainer.rollout_engine.roll_out
    trainer.rollout_engine.roll_out = lambda prompt_ids, *args, **kwargs: calls.append(len(prompt_ids)) or roll_out(
        prompt_ids, *args, **kwargs)
    trainer.model.train()
    trainer._generate_and_score_completions(batch_inputs())
    rows = trainer.last_rollout.rows
    assert calls == ([4, 2] if guided else [4])
    assert not rows[2].retrievals and not rows[3].retrievals
    assert bool(rows[0].retrievals) == bool(rows[1].retrievals) == guided
    assert rows[0].is_hybrid == rows[1].is_hybrid == guided
    assert trainer._metrics["train"]["rapo/guided_group_share"][-1] == float(guided)
    # rewards of the step are the rows' own: a guided row's answer comes from its second rollout
    assert trainer.last_rollout.rewards.tolist() == ([4.0, 5.0] if guided else [1.0, 2.0]) + [3.0, 0.0]


def test_retrieved_token_loss_is_added_to_the_policy_loss(tiny_model_dir, tmp_path):
    def scored(weight):
        trainer = rapo_trainer(tiny_model_dir, tmp_path, store=FixedStore(text=STORED), retrieve_prob=1.0,
                               retrieved_token_loss_weight=weight)
        script(trainer)
        trainer.model.train()
        torch.manual_seed(0)
        return trainer, trainer._generate_and_score_completions(batch_inputs())

    trainer, batch = scored(0.5)
    weights = batch[RETRIEVED_WEIGHT_KEY]
    rows = trainer.last_rollout.rows
    for i, row in enumerate(rows):
        learned = weights[i].nonzero().flatten().tolist()
        if batch["advantages"][i] > 0 and row.retrievals:
            spans = [range(*e.step_tokens) for e in row.retrievals]
            assert learned == [t for span in spans for t in span]
            assert trainer.processing_class.decode(batch["completion_ids"][i, learned[0]:learned[-1] + 1])
        else:
            assert learned == []
    assert weights.any()  # a hybrid row above the group mean retrieved
    loss, grads = loss_and_grads(trainer, batch)

    plain, plain_batch = scored(0.0)
    assert RETRIEVED_WEIGHT_KEY not in plain_batch
    plain_loss, _ = loss_and_grads(trainer, {k: v for k, v in batch.items() if k != RETRIEVED_WEIGHT_KEY})
    assert loss.item() != pytest.approx(plain_loss.item())
    assert trainer._metrics["train"]["rapo/retrieved_token_loss"][-1] == pytest.approx(
        loss.item() - plain_loss.item(), abs=1e-6)
    assert trainer._metrics["train"]["rapo/retrieved_tokens_learned"][-1] == float((weights != 0).sum())


def test_retrieved_tokens_learned_is_the_count_over_every_process(tiny_model_dir, tmp_path, monkeypatch):
    # A second process with as many tokens learned: the log shows both processes' count, not their mean.
    monkeypatch.setattr(trainer_module, "gathered_sum", lambda accelerator, value: 2 * float(value))
    trainer = rapo_trainer(tiny_model_dir, tmp_path, store=FixedStore(text=STORED), retrieve_prob=1.0,
                           retrieved_token_loss_weight=0.5)
    script(trainer)
    trainer.model.train()
    batch = trainer._generate_and_score_completions(batch_inputs())
    learned = float((batch[RETRIEVED_WEIGHT_KEY] != 0).sum())
    assert learned > 0
    assert trainer._metrics["train"]["rapo/retrieved_tokens_learned"][-1] == 2 * learned


@pytest.mark.parametrize("mask_truncated", [False, True])
def test_retrieved_token_weights_follow_trls_truncation_mask(tiny_model_dir, tmp_path, mask_truncated):
    # Row 0 (hybrid) retrieves after its tool call, then writes 7s until its turn budget runs out: the best reward
    # of the group, and truncated. Under mask_truncated_completions TRL trains none of its tokens; neither may we.
    scripts = [[Turn("<python>1</python>", 8), Turn("7 " * 40, 2)]] + [list(s) for s in SCRIPTS[1:]]
    trainer = rapo_trainer(tiny_model_dir, tmp_path, store=FixedStore(text=STORED), retrieve_prob=1.0,
                           retrieved_token_loss_weight=0.5, mask_truncated_completions=mask_truncated)
    script(trainer, scripts)
    trainer.model.train()
    batch = trainer._generate_and_score_completions(batch_inputs())
    row = trainer.last_rollout.rows[0]
    assert row.truncated and row.retrievals and batch["advantages"][0] > 0
    assert bool(batch[RETRIEVED_WEIGHT_KEY][0].any()) is not mask_truncated


@pytest.mark.parametrize("as_own", [False, True])
def test_a_prefix_rollout_scores_and_learns_the_stored_step_as_the_policys_own(tiny_model_dir, tmp_path, as_own):
    # Hybrid rows 0-1 begin with the stored step (two "7"s); as the policy's own step the reward counts them.
    trainer = rapo_trainer(tiny_model_dir, tmp_path, store=FixedStore(text=STORED.strip()), retrieve_prob=1.0,
                           retrieve_at=["start"], retrieved_step_as_own=as_own, retrieved_token_loss_weight=2.0)
    script(trainer)
    trainer.model.train()
    batch = trainer._generate_and_score_completions(batch_inputs())
    rows, rewards = trainer.last_rollout.rows, trainer.last_rollout.rewards.tolist()
    assert [[e.boundary for e in row.retrievals] for row in rows] == [["start"], ["start"], [], []]
    assert rewards[:2] == [1.0 + 2 * as_own, 2.0 + 2 * as_own] and rewards[2:] == [3.0, 0.0]  # the scripts' own 7s
    weights = batch[RETRIEVED_WEIGHT_KEY]
    for i, row in enumerate(rows[:2]):
        learned = weights[i].nonzero().flatten().tolist()
        if batch["advantages"][i] > 0:
            assert learned == list(range(*row.retrievals[0].step_tokens))
            assert trainer.processing_class.decode(batch["completion_ids"][i, learned]).strip() == STORED.split(
                "\n<result>")[0]
        else:
            assert learned == []
    assert weights[1].any() and bool(weights[0].any()) is as_own  # row 0 is above the group mean by the stored 7s
