"""One generation batch, whole or split into micro-batches accumulated into one optimizer step: RAPO's additions (the
shaped ratio, the retrieved-token loss and its metrics) give the same update and log the same figures either way,
for every TRL loss type whose own loss does not depend on the split (bnpo does: it averages each micro-batch's
tokens)."""

from __future__ import annotations

import pytest
import torch

from rapo_trl.trainer.loss_terms import RETRIEVED_WEIGHT_KEY
from rapo_trl.trainer.retrieved_logp import RETRIEVED_TOKENS_KEY
from tests.helpers.fakes import FixedStore
from tests.helpers.trainers import G, batch_inputs, rapo_trainer, script

STORED = "<think>seven</think>\n<python>print(7)</python>\n<result>\n7\n</result>\n"
# Rows 0-1 (hybrid) are shown a stored step, so they carry retrieved tokens, a shaped ratio and are longer.
RETRIEVING = dict(store=FixedStore(text=STORED), retrieve_prob=1.0, importance_shaping_weight=1.0,
                  retrieved_token_loss_weight=0.5)
SPLIT_INVARIANT_LOSS_TYPES = ("dapo", "grpo", "dr_grpo")
METRICS = ("rapo/retrieved_token_loss",)
GRAD_ATOL, LOSS_ATOL = 1e-6, 1e-6


def scored_batch(tiny_model_dir, tmp_path, loss_type):
    trainer = rapo_trainer(tiny_model_dir, tmp_path / "scoring", loss_type=loss_type, **RETRIEVING)
    script(trainer)
    trainer.model.train()
    torch.manual_seed(0)
    batch = trainer._generate_and_score_completions(batch_inputs())
    assert batch[RETRIEVED_WEIGHT_KEY].any() and batch[RETRIEVED_TOKENS_KEY].any()
    return batch


def micro_batch(batch, rows):
    index = torch.tensor(rows)
    return {key: value[index] if isinstance(value, torch.Tensor) and value.ndim >= 1 and len(value) == G else value
            for key, value in batch.items()}


def accumulated_step(tiny_model_dir, tmp_path, batch, split, loss_type):
    """The loss, gradients and logged metrics of one optimizer step over ``split`` (each a micro-batch's rows), on a
    trainer configured for it: one generation of ``len(split)`` micro-batches, all accumulated."""
    steps = len(split)
    trainer = rapo_trainer(tiny_model_dir, tmp_path / f"split{steps}", loss_type=loss_type,
                           per_device_train_batch_size=G // steps, gradient_accumulation_steps=steps, **RETRIEVING)
    trainer.model.train()  # the tiny Qwen2 has no dropout: the splits differ only in how the rows are grouped
    trainer.current_gradient_accumulation_steps = steps
    trainer.model.zero_grad()
    total = 0.0
    for rows in split:
        loss = trainer.compute_loss(trainer.model, micro_batch(batch, rows))
        loss.backward()
        total += loss.item()
    grads = {name: p.grad.clone() for name, p in trainer.model.named_parameters() if p.grad is not None}
    logged = {name: sum(values) / len(values) for name, values in trainer._metrics["train"].items()}
    return total, grads, logged


@pytest.mark.parametrize("loss_type", SPLIT_INVARIANT_LOSS_TYPES)
def test_a_split_generation_gives_the_whole_batchs_update_and_figures(tiny_model_dir, tmp_path, loss_type):
    batch = scored_batch(tiny_model_dir, tmp_path, loss_type)
    whole_loss, whole_grads, whole_logged = accumulated_step(tiny_model_dir, tmp_path, batch, [[0, 1, 2, 3]],
                                                             loss_type)
    for split in ([[0, 1], [2, 3]], [[0, 2], [1, 3]], [[3], [0], [2], [1]]):
        loss, grads, logged = accumulated_step(tiny_model_dir, tmp_path, batch, split, loss_type)
        assert loss == pytest.approx(whole_loss, abs=LOSS_ATOL), split
        assert grads.keys() == whole_grads.keys()
        for name in grads:
            assert torch.allclose(grads[name], whole_grads[name], atol=GRAD_ATOL), (split, name)
        for name in METRICS:
            assert logged[name] == pytest.approx(whole_logged[name], abs=LOSS_ATOL), (split, name)
