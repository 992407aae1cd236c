"""The step's state across TRL's hooks, and the loss forward's: a hook that runs twice, never, or on other rows
raises instead of training as plain GRPO."""

from __future__ import annotations

import math

import pytest
import torch
from trl import GRPOTrainer

from rapo_trl.rollout import RolloutRow
from rapo_trl.trainer.loss_forward import RETRIEVED_FRACTION_KEY, LossForward
from rapo_trl.trainer.step_state import RolloutHandOverError, StepState
from tests.helpers.fakes import FixedStore
from tests.helpers.trainers import batch_inputs, loss_and_grads, rapo_trainer, script

WEIGHTS = torch.ones(1)


def rows(*completions):
    return [RolloutRow(prompt_ids=[1], completion_ids=list(c)) for c in completions]


def test_score_keeps_weighted_rewards_once():
    pending = StepState(rows([5, 6], [7]), "train")
    pending.score([[5, 6], [7]], torch.tensor([[1.0, 2.0], [0.5, float("nan")]]), torch.tensor([1.0, 0.5]))
    assert pending.rewards.tolist() == [2.0, 0.5]
    pending.check_scored(2)
    with pytest.raises(RolloutHandOverError, match="twice"):
        pending.score([[5, 6], [7]], torch.zeros(2, 1), WEIGHTS)


@pytest.mark.parametrize("given, match", [([[5, 6]], "1 completions for a rollout of 2"),
                                          ([[7], [5, 6]], "completion 0 .* not row 0")])
def test_score_refuses_other_rows(given, match):
    with pytest.raises(RolloutHandOverError, match=match):
        StepState(rows([5, 6], [7]), "train").score(given, torch.zeros(len(given), 1), WEIGHTS)


def test_unscored_or_resized_rollout_is_refused():
    pending = StepState(rows([1]), "train")
    with pytest.raises(RolloutHandOverError, match="never ran"):
        pending.check_scored(1)
    pending.score([[1]], torch.zeros(1, 1), WEIGHTS)
    with pytest.raises(RolloutHandOverError, match="3 advantages"):
        pending.check_scored(3)


def test_replacements_reach_trls_prompts_only_when_the_inputs_hold_them():
    replacement = {"prompt": "new", "answer": "2"}
    pending = StepState(rows([1], [2]), "train", replaced={1: replacement})
    inputs, prompts = [{"prompt": "old", "answer": "1"}, replacement], ["old", "old"]
    pending.apply_replacements(inputs, prompts)
    assert prompts == ["old", "new"]
    with pytest.raises(RolloutHandOverError, match="input row 1 other than the one dynamic sampling put there"):
        pending.apply_replacements([inputs[0], dict(replacement)], ["old", "old"])


def test_ratio_shift_is_applied_to_one_forward_only():
    inputs = {}
    forward = LossForward(inputs, torch.tensor([math.exp(0.5) - 1.0]), shaping_weight=1.0)  # log(1 + m F) = 0.5
    with pytest.raises(RolloutHandOverError, match="did not run"):
        forward.check_used()
    logps = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    forward.apply(logps)
    assert inputs["old_per_token_logps"][0].tolist() == pytest.approx([-1.5, -2.5])
    assert not inputs["old_per_token_logps"].requires_grad
    assert inputs["sampling_per_token_logps"].tolist() == [[-1.0, -2.0]]  # the off-policy mask is not shaped
    forward.check_used()
    with pytest.raises(RolloutHandOverError, match="more than one forward"):
        forward.apply(logps)


def test_the_forward_keeps_its_logps_for_the_retrieved_token_term_with_its_graph():
    inputs = {"old_per_token_logps": torch.zeros(1, 2)}
    forward = LossForward(inputs, retrieved_fractions=None, shaping_weight=0.05)  # evaluation: nothing to shape
    logps = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    forward.apply(logps)
    assert forward.logps is logps and inputs["old_per_token_logps"].tolist() == [[0.0, 0.0]]  # nothing shifted


def test_a_rollout_writes_its_replacement_rows_into_the_steps_inputs():
    inputs = [{"prompt": "old"}, {"prompt": "old"}]
    step = StepState(inputs=inputs)
    replacement = {"prompt": "new"}
    step.rolled_out(rows([1], [2]), "train", {1: replacement})
    assert inputs[1] is replacement and step.mode == "train"
    with pytest.raises(RolloutHandOverError, match="twice"):
        step.rolled_out(rows([1], [2]), "train", {})


def test_a_reordering_between_rollout_and_rewards_raises(tiny_model_dir, tmp_path):
    trainer = rapo_trainer(tiny_model_dir, tmp_path, store=FixedStore(), retrieve_prob=1.0)
    script(trainer)
    rollout = trainer.rollout_func

    def reversed_rollout(prompts, trainer=None):
        out = rollout(prompts, trainer)
        return {k: v[::-1] if isinstance(v, list) else v for k, v in out.items()}

    trainer.rollout_func = reversed_rollout
    trainer.model.train()
    with pytest.raises(RolloutHandOverError, match="not row 0"):
        trainer._generate_and_score_completions(batch_inputs())


def test_rollout_twice_or_rewards_without_rollout_raise(tiny_model_dir, tmp_path):
    trainer = rapo_trainer(tiny_model_dir, tmp_path)
    script(trainer)
    prompts = [row["prompt"] for row in batch_inputs()]
    with pytest.raises(RolloutHandOverError, match="without a pending rollout"):
        trainer._calculate_rewards(batch_inputs(), prompts, ["x"] * 4, [[1]] * 4)
    trainer.step_state = StepState(inputs=batch_inputs())  # as _generate_and_score_completions opens a step
    trainer._hybrid_rollout(prompts)
    with pytest.raises(RolloutHandOverError, match="twice"):
        trainer._hybrid_rollout(prompts)


def test_a_rollout_outside_a_step_or_a_failed_step_leaves_nothing_behind(tiny_model_dir, tmp_path):
    trainer = rapo_trainer(tiny_model_dir, tmp_path)
    trainer.model.train()
    script(trainer)
    trainer._hybrid_rollout([row["prompt"] for row in batch_inputs()])  # a bare rollout_func call
    assert trainer.step_state is None

    def failing(completions, **kwargs):
        raise RuntimeError("reward failed")

    rewards, trainer.reward_funcs = trainer.reward_funcs, [failing]
    script(trainer)
    with pytest.raises(RuntimeError, match="reward failed"):
        trainer._generate_and_score_completions(batch_inputs())
    assert trainer.step_state is None
    trainer.reward_funcs = rewards
    script(trainer)
    out = trainer._generate_and_score_completions(batch_inputs())
    assert trainer.step_state is None and len(trainer.last_rollout.rows) == len(out["advantages"]) == 4


def test_a_loss_that_runs_two_forwards_refuses_the_shaped_ratio(tiny_model_dir, tmp_path, monkeypatch):
    trainer = rapo_trainer(tiny_model_dir, tmp_path, store=FixedStore(), retrieve_prob=1.0)
    script(trainer)
    trainer.model.train()
    batch = trainer._generate_and_score_completions(batch_inputs())
    assert bool((batch[RETRIEVED_FRACTION_KEY] != 0).any())
    stock = GRPOTrainer._compute_loss

    def two_forwards(self, model, inputs):
        ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        self._get_per_token_logps_and_entropies(model, ids, mask, inputs["completion_ids"].size(1))
        return stock(self, model, inputs)

    monkeypatch.setattr(GRPOTrainer, "_compute_loss", two_forwards)
    with pytest.raises(RolloutHandOverError, match="more than one forward"):
        loss_and_grads(trainer, batch)
