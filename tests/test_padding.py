"""Dropping all-padding columns before the loss leaves the loss and its gradients unchanged."""

from __future__ import annotations

import contextlib

import pytest
import torch

import rapo_trl.trainer.trainer as trainer_module
from rapo_trl.padding import trim_padding_columns
from tests.helpers.fakes import FixedStore
from tests.helpers.trainers import batch_inputs, loss_and_grads, rapo_trainer, script

# Measured on the tiny model: the loss equal with and without trimming, gradients at most 2e-8 apart.
LOSS_ATOL, GRAD_ATOL = 1e-7, 2e-7


@contextlib.contextmanager
def trimming(trim: bool):
    """The loss forward as the trainer runs it (``trim``), or on the columns as they come."""
    with pytest.MonkeyPatch.context() as patch:
        if not trim:
            patch.setattr(trainer_module, "trim_padding_columns", lambda inputs, multiple=None: inputs)
        yield


def rows_of(batch: dict, index: list[int]) -> dict:
    """The micro-batch of rows ``index``, still padded to the whole generation batch's width."""
    rows = len(batch["prompt_ids"])
    picked = torch.tensor(index)
    return {k: v[picked] if isinstance(v, torch.Tensor) and v.dim() >= 1 and v.shape[0] == rows else v
            for k, v in batch.items()}


def test_trim_drops_only_columns_that_are_padding_in_every_row():
    batch = {
        "prompt_ids": torch.tensor([[0, 0, 5, 6], [0, 7, 8, 9]]),
        "prompt_mask": torch.tensor([[0, 0, 1, 1], [0, 1, 1, 1]]),
        "completion_ids": torch.tensor([[1, 2, 0, 0, 0], [3, 0, 0, 0, 0]]),
        "completion_mask": torch.tensor([[1, 1, 0, 0, 0], [1, 0, 0, 0, 0]]),
        "tool_mask": torch.ones(2, 5, dtype=torch.long),
        "old_per_token_logps": torch.randn(2, 5),
        "advantages": torch.tensor([1.0, -1.0]),
    }
    out = trim_padding_columns(batch)
    assert out["prompt_ids"].tolist() == [[0, 5, 6], [7, 8, 9]]
    assert out["completion_ids"].tolist() == [[1, 2], [3, 0]]
    assert out["tool_mask"].shape == out["old_per_token_logps"].shape == (2, 2)
    assert torch.equal(out["old_per_token_logps"], batch["old_per_token_logps"][:, :2])
    assert out["advantages"] is batch["advantages"]
    assert batch["completion_ids"].shape == (2, 5)  # the buffered batch is left whole
    assert trim_padding_columns(out) is out  # nothing left to drop
    empty = dict(batch, completion_mask=torch.zeros(2, 5, dtype=torch.long))
    assert trim_padding_columns(empty)["completion_ids"].shape == (2, 1)  # TRL's metrics need one column
    images = dict(batch, pixel_values=torch.zeros(1))
    assert trim_padding_columns(images) is images


def test_trim_keeps_widths_a_multiple_of_pad_to_multiple_of():
    batch = {
        "prompt_ids": torch.tensor([[0, 0, 0, 0, 0, 5], [0, 0, 0, 0, 7, 8]]),
        "prompt_mask": torch.tensor([[0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 1, 1]]),
        "completion_ids": torch.tensor([[1, 2, 4, 0, 0, 0], [3, 0, 0, 0, 0, 0]]),
        "completion_mask": torch.tensor([[1, 1, 1, 0, 0, 0], [1, 0, 0, 0, 0, 0]]),
    }
    out = trim_padding_columns(batch, multiple=2)
    assert out["prompt_ids"].tolist() == [[0, 5], [7, 8]]
    assert out["completion_ids"].tolist() == [[1, 2, 4, 0], [3, 0, 0, 0]]
    assert trim_padding_columns(batch, multiple=3)["prompt_ids"].shape == (2, 3)
    assert trim_padding_columns(batch, multiple=6) is batch  # TRL's own widths: nothing to drop


def test_the_loss_forward_keeps_pad_to_multiple_of(tiny_model_dir, tmp_path):
    # The option bounds the shapes a compiled forward sees: neither trimming nor the shared prompt forward may
    # hand the model a width TRL's padding would not have.
    multiple = 16
    trainer = rapo_trainer(tiny_model_dir, tmp_path, pad_to_multiple_of=multiple)
    script(trainer)
    trainer.model.train()
    short = rows_of(trainer._generate_and_score_completions(batch_inputs()), [3, 3])  # the shortest, twice
    widths = []
    hook = trainer.model.register_forward_pre_hook(
        lambda module, args, kwargs: widths.append((kwargs.get("input_ids") if "input_ids" in kwargs else args[0]).shape[1]),
        with_kwargs=True,
    )
    try:
        loss, _ = loss_and_grads(trainer, short)
    finally:
        hook.remove()
    assert widths and all(width % multiple == 0 for width in widths), widths
    assert min(widths) < short["prompt_ids"].shape[1] + short["completion_ids"].shape[1]  # padding was dropped
    assert loss != 0


def _micro_batch_loss(tiny_model_dir, tmp_path, trim: bool, **kwargs):
    trainer = rapo_trainer(tiny_model_dir, tmp_path, **kwargs)
    script(trainer)
    trainer.model.train()
    batch = trainer._generate_and_score_completions(batch_inputs())
    short = rows_of(batch, [2, 3])  # the two shortest rollouts of the group
    with trimming(trim):
        return short, *loss_and_grads(trainer, short)


def test_loss_and_gradients_equal_with_and_without_trimming(tiny_model_dir, tmp_path):
    # Hybrid rows retrieve, so the shaped ratio (the shift of the old log-probs) runs through the trimmed batch too.
    kwargs = dict(store=FixedStore(), retrieve_prob=1.0, num_hybrid_generations=2, importance_shaping_weight=1.0)
    short, loss, grads = _micro_batch_loss(tiny_model_dir, tmp_path / "trim", True, **kwargs)
    _, full_loss, full_grads = _micro_batch_loss(tiny_model_dir, tmp_path / "full", False, **kwargs)
    trimmed = trim_padding_columns(short)
    assert trimmed["completion_ids"].shape[1] < short["completion_ids"].shape[1]  # there was padding to drop
    assert loss != 0 and torch.allclose(loss, full_loss, atol=LOSS_ATOL)
    assert grads.keys() == full_grads.keys() and grads
    for name in grads:
        assert torch.allclose(grads[name], full_grads[name], atol=GRAD_ATOL), name


def test_dropping_left_prompt_padding_keeps_the_loss(tiny_model_dir, tmp_path):
    # Rotary positions are relative: removing columns of left padding shifts every position alike.
    results = []
    for trim in (True, False):
        trainer = rapo_trainer(tiny_model_dir, tmp_path / str(trim))
        script(trainer)
        trainer.model.train()
        batch = trainer._generate_and_score_completions(batch_inputs())
        pad = torch.full((len(batch["prompt_ids"]), 5), trainer.processing_class.pad_token_id)
        batch["prompt_ids"] = torch.cat([pad, batch["prompt_ids"]], dim=1)
        batch["prompt_mask"] = torch.cat([torch.zeros_like(pad), batch["prompt_mask"]], dim=1)
        with trimming(trim):
            results.append(loss_and_grads(trainer, batch))
    (loss, grads), (full_loss, full_grads) = results
    assert loss != 0 and torch.allclose(loss, full_loss, atol=LOSS_ATOL)
    for name in grads:
        assert torch.allclose(grads[name], full_grads[name], atol=GRAD_ATOL), name
