"""TRL's ``test_train_with_mask_truncated_completions`` (and its ``_all_masked`` sibling), ported to RAPOTrainer.

Source: huggingface/trl, tests/test_grpo_trainer.py (``TestGRPOTrainer``; the version with ``loss_type="dapo"``,
from "Fix GRPO truncated-completion loss normalization", #6439, as in the installed TRL 1.16). TRL patches
``transformers.generation.utils.GenerationMixin.generate`` with a fake that returns three fixed rows of
``max_completion_length=8`` ids after the prompt: one without EOS (truncated), one with EOS then padding, one
whose EOS is its last allowed token, and checks that, with ``mask_truncated_completions=True``, training still
updates every parameter (the two terminated rows carry the loss).

What it holds RAPOTrainer (retrieval off) to: its engine decodes with its own KV-cache loop and falls back to
``model.generate`` only for a patched ``generate``. ``kv_decode.stock_generate`` compares with the function
transformers defined, not with ``GenerationMixin.generate``, which a patch of ``GenerationMixin`` itself replaces
on both sides: otherwise the loop would run, the mock would never be called, the random tiny policy would sample no
EOS in 8 tokens, every row would be truncated and masked, and the loss would be zero with no parameter change.

Differences from TRL's test, all for running offline on the tiny model: the tiny Qwen2 checkpoint and tokenizer
(``tiny_model_dir``) instead of ``trl-internal-testing/tiny-Qwen2ForCausalLM-2.5``; its EOS/pad ids instead of
151645/151643 and ordinary (non-special) ids instead of 1..18, which are special tokens in the tiny vocabulary; a
reward function (completion length: the rows differ, so advantages are non-zero) instead of the tiny reward model;
one prompt (one step, one group of three) instead of the "zen" dataset. ``GRPOTrainer`` runs the same test as a control.
"""

from __future__ import annotations

from unittest.mock import patch

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from rapo_trl.config import RAPOConfig
from rapo_trl.trainer import RAPOTrainer

MAX_COMPLETION_LENGTH = 8
BASE = 100  # ordinary tokens of the tiny vocabulary (ids 0-2 are its special tokens)


def fake_rows(eos: int, pad: int, all_truncated: bool = False) -> list[list[int]]:
    """TRL's three rows, with the tiny tokenizer's ids."""
    if all_truncated:
        return [[BASE + 30 + 8 * r + i for i in range(MAX_COMPLETION_LENGTH)] for r in range(3)]
    return [
        [BASE + i for i in range(1, 9)],  # this one is truncated
        [BASE + 9, BASE + 10, BASE + 11, eos, pad, pad, pad, pad],  # this one contains eos
        [BASE + 12, BASE + 13, BASE + 14, BASE + 15, BASE + 16, BASE + 17, BASE + 18, eos],  # eos just within the limit
    ]


def completion_length(completions, completion_ids, **kwargs):
    return [float(len(ids)) for ids in completion_ids]


def build_trainer(trainer_cls, tiny_model_dir, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    dataset = Dataset.from_list([{"prompt": "Tell me a story about the number 7."}])  # one step: one group
    kwargs = dict(
        output_dir=str(tmp_path),
        learning_rate=0.1,  # use higher lr because gradients are tiny and default lr can stall updates
        per_device_train_batch_size=3,
        num_generations=3,
        max_completion_length=MAX_COMPLETION_LENGTH,
        mask_truncated_completions=True,  # Enable masking of truncated completions
        loss_type="dapo",  # we test specifically dapo because it normalizes by num_items_in_batch
        num_train_epochs=1,
        use_cpu=True,
        bf16=False,
        save_strategy="no",
        seed=0,
        report_to="none",
    )
    if trainer_cls is RAPOTrainer:
        args = RAPOConfig(**kwargs, retrieve_prob=0.0)  # retrieval off: the engine is plain multi-turn GRPO
    else:
        args = GRPOConfig(**kwargs)
    trainer = trainer_cls(model, completion_length, args=args, train_dataset=dataset, processing_class=tokenizer)
    # Record the completion mask TRL builds from each batch (after mask_truncated_completions).
    masks = []
    score = trainer._generate_and_score_completions

    def recording(inputs):
        out = score(inputs)
        masks.append(out["completion_mask"].detach().cpu().clone())
        return out

    trainer._generate_and_score_completions = recording
    # Record the engine's rows (not the trainer's own bookkeeping, which may change).
    trainer.rollouts = []
    engine = getattr(trainer, "rollout_engine", None)
    if engine is not None:
        roll_out = engine.roll_out

        def recording_roll_out(*args, **kwargs):
            rollout = roll_out(*args, **kwargs)
            trainer.rollouts.append(rollout.rows)
            return rollout

        engine.roll_out = recording_roll_out
    return trainer, tokenizer, masks


def train_with_fake_generate(trainer_cls, tiny_model_dir, tmp_path, all_truncated=False):
    trainer, tokenizer, masks = build_trainer(trainer_cls, tiny_model_dir, tmp_path)
    rows = fake_rows(tokenizer.eos_token_id, tokenizer.pad_token_id, all_truncated)

    def fake_generate(input_ids, **kwargs):
        completion_ids = torch.tensor(rows, device=input_ids.device)
        return torch.cat([input_ids, completion_ids], dim=1)

    previous = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    with patch("transformers.generation.utils.GenerationMixin.generate") as mock_generate:
        mock_generate.side_effect = fake_generate
        trainer.train()
    return trainer, tokenizer, masks, previous, mock_generate


@pytest.mark.parametrize("trainer_cls", [RAPOTrainer, GRPOTrainer], ids=["rapo", "grpo"])
def test_train_with_mask_truncated_completions(trainer_cls, tiny_model_dir, tmp_path):
    trainer, tok, masks, previous, mock_generate = train_with_fake_generate(trainer_cls, tiny_model_dir, tmp_path)

    # The mocked generate is the one that ran (once per generation batch), not RAPO's KV-cache loop.
    assert mock_generate.call_count == trainer.state.global_step == 1
    if trainer_cls is RAPOTrainer:
        assert trainer.rollout_engine.backend.last_path == "generate"
        rows = trainer.rollouts[-1]
        eos, pad = tok.eos_token_id, tok.pad_token_id
        expected = fake_rows(eos, pad)
        # Read as TRL reads them: the row without EOS is whole and truncated; the others end at their EOS.
        assert [r.completion_ids for r in rows] == [expected[0], expected[1][:4], expected[2]]
        assert [(r.truncated, r.finished) for r in rows] == [(True, False), (False, True), (False, True)]

    # mask_truncated_completions: the truncated row is masked whole, the EOS rows (incl. EOS in the last slot) not.
    mask = masks[-1]
    assert mask[0].sum() == 0
    assert mask[1].tolist()[:4] == [1, 1, 1, 1] and mask[2].tolist()[:8] == [1] * 8
    log = trainer.state.log_history
    clipped = [entry["completions/clipped_ratio"] for entry in log if "completions/clipped_ratio" in entry]
    assert clipped and clipped[-1] == pytest.approx(1 / 3)
    if trainer_cls is RAPOTrainer:
        assert [e["rapo/truncated_rate"] for e in log if "rapo/truncated_rate" in e][-1] == pytest.approx(1 / 3)

    assert log[-1]["train_loss"] is not None
    # Check that the params have changed
    for n, param in previous.items():
        new_param = trainer.model.get_parameter(n)
        assert not torch.equal(param, new_param), f"Parameter {n} has not changed."


@pytest.mark.parametrize("trainer_cls", [RAPOTrainer, GRPOTrainer], ids=["rapo", "grpo"])
def test_train_with_mask_truncated_completions_all_masked(trainer_cls, tiny_model_dir, tmp_path):
    """Every row reaches the budget without EOS: all are masked, the loss is zero and no parameter moves.

    TRL's version relies on a random model never sampling EOS; here the fake generate makes it certain.
    """
    trainer, _, masks, previous, mock_generate = train_with_fake_generate(
        trainer_cls, tiny_model_dir, tmp_path, all_truncated=True
    )
    assert mock_generate.call_count == trainer.state.global_step == 1
    if trainer_cls is RAPOTrainer:
        assert all(r.truncated and not r.finished for r in trainer.rollouts[-1])
    assert masks[-1].sum() == 0
    assert trainer.state.log_history[-1]["train_loss"] == pytest.approx(0.0)
    for n, param in previous.items():
        assert torch.equal(param, trainer.model.get_parameter(n)), f"Parameter {n} has changed."
