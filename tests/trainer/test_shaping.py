"""The shaped ratio reaches the loss whatever path TRL's compute_loss would take, and moves only the clipped
ratio: the off-policy mask keeps comparing with unshifted log-probs."""

from __future__ import annotations

import torch
from trl import GRPOTrainer

from tests.helpers.fakes import FixedStore
from tests.helpers.trainers import batch_inputs, loss_and_grads, rapo_trainer, script


def shaped_batch(trainer):
    script(trainer)
    trainer.model.train()
    batch = trainer._generate_and_score_completions(batch_inputs())
    assert bool((batch["rapo_retrieved_fraction"] != 0).any())
    return batch


def test_compute_loss_goes_through_the_shaped_loss_even_if_trl_routes_elsewhere(tiny_model_dir, tmp_path,
                                                                                  monkeypatch):
    trainer = rapo_trainer(tiny_model_dir, tmp_path, store=FixedStore(), retrieve_prob=1.0)
    batch = shaped_batch(trainer)
    reference, _ = loss_and_grads(trainer, batch)

    def another_loss_path(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        return torch.zeros((), requires_grad=True)  # e.g. a fused kernel loss that never calls _compute_loss

    monkeypatch.setattr(GRPOTrainer, "compute_loss", another_loss_path)
    loss, _ = loss_and_grads(trainer, batch)
    assert loss.item() == reference.item() != 0.0


def test_the_off_policy_mask_sees_unshifted_log_probs(tiny_model_dir, tmp_path, monkeypatch):
    trainer = rapo_trainer(tiny_model_dir, tmp_path, store=FixedStore(), retrieve_prob=1.0,
                           off_policy_mask_threshold=0.5)
    batch = shaped_batch(trainer)
    seen = []
    stock = GRPOTrainer.get_off_policy_mask

    def recording(advantages, per_token_logps, sampling_per_token_logps, mask, off_policy_threshold):
        seen.append((per_token_logps.detach().clone(), sampling_per_token_logps.clone()))
        return stock(advantages, per_token_logps, sampling_per_token_logps, mask, off_policy_threshold)

    monkeypatch.setattr(GRPOTrainer, "get_off_policy_mask", staticmethod(recording))
    loss_and_grads(trainer, batch)  # aligned generation: old log-probs come from the loss's own forward
    current, sampled = seen[-1]
    assert torch.equal(current, sampled)  # not lowered by log(1 + m F_ret)

    old = current - 0.25  # a batch that carries old log-probs (several iterations per generation)
    loss_and_grads(trainer, {**batch, "old_per_token_logps": old})
    _, sampled = seen[-1]
    assert torch.equal(sampled, old)
