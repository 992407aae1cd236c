"""What a training step logs beside TRL's metrics: where its advantage went, the retrieved-token loss and how likely
the policy finds the stored steps it was shown; and TRL's own entropy and completion length still reach the log."""

from __future__ import annotations

import pytest
import torch

from rapo_trl.core.objective import retrieved_token_mask
from rapo_trl.core.reference import completion_logps
from rapo_trl.trainer.retrieved_logp import RETRIEVED_TOKENS_KEY
from tests.helpers.fakes import FixedStore
from tests.helpers.trainers import batch_inputs, loss_and_grads, rapo_trainer, script

STORED = "<think>seven</think>\n<python>print(7)</python>\n<result>\n7\n</result>\n"
ADVANTAGE_METRICS = ("rapo/on_policy_negative_share", "rapo/on_policy_advantage_sum",
                     "rapo/positive_advantage_mass_on_policy", "rapo/positive_advantage_mass_retrieved",
                     "rapo/positive_advantage_share_retrieved")


def test_a_training_step_logs_trls_entropy_and_length_and_rapos_advantage_and_stored_step_metrics(tiny_model_dir,
                                                                                                   tmp_path):
    trainer = rapo_trainer(tiny_model_dir, tmp_path, store=FixedStore(text=STORED), retrieve_prob=1.0, max_steps=1,
                           retrieved_token_loss_weight=2.0, retrieved_token_shaping=None)
    script(trainer)
    trainer.train()
    logged = next(entry for entry in trainer.state.log_history if "loss" in entry)
    for name in ("entropy", "completions/mean_length", "rapo/retrieved_token_loss", "rapo/retrieved_token_logp",
                 *ADVANTAGE_METRICS):
        assert name in logged, name
    assert logged["entropy"] > 0 and logged["completions/mean_length"] > 0
    assert logged["rapo/retrieved_token_logp"] < 0


@pytest.mark.parametrize("weight", [0.0, 0.5])
def test_the_stored_steps_log_likelihood_is_the_mean_over_their_tokens_whatever_the_weight(tiny_model_dir, tmp_path,
                                                                                           weight):
    trainer = rapo_trainer(tiny_model_dir, tmp_path, store=FixedStore(text=STORED), retrieve_prob=1.0,
                           retrieved_token_loss_weight=weight)
    script(trainer)
    trainer.model.train()
    batch = trainer._generate_and_score_completions(batch_inputs())
    rows = trainer.last_rollout.rows
    assert batch[RETRIEVED_TOKENS_KEY].any() and not batch[RETRIEVED_TOKENS_KEY][2:].any()  # rows 0-1 are hybrid
    loss_and_grads(trainer, batch)

    with torch.no_grad():
        logps, _ = completion_logps(trainer.model, rows)
    mask = retrieved_token_mask(rows, logps.size(1)).bool()
    logged = trainer._metrics["train"]["rapo/retrieved_token_logp"]
    assert logged == [pytest.approx(logps[mask].mean().item(), abs=1e-5)]


def test_without_a_store_nothing_about_stored_steps_is_added(tiny_model_dir, tmp_path):
    trainer = rapo_trainer(tiny_model_dir, tmp_path)
    script(trainer)
    trainer.model.train()
    batch = trainer._generate_and_score_completions(batch_inputs())
    assert RETRIEVED_TOKENS_KEY not in batch
    loss_and_grads(trainer, batch)
    assert "rapo/retrieved_token_logp" not in trainer._metrics["train"]
