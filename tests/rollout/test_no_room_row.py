"""A row the policy had no room to sample in gets one forced EOS (TRL reads ``completions[-1]``): a forced id, so
mask 0 like tool results and retrieved steps, never trained on as if the policy had written it."""

from __future__ import annotations

import sys
from types import ModuleType, SimpleNamespace

import pytest
import torch

from rapo_trl.rollout import HybridRolloutEngine, RolloutConfig
from tests.helpers.trainers import batch_inputs, loss_and_grads, rapo_trainer, script


class _FullContextLLM:
    """A vLLM engine stand-in whose context the prompt already fills: the backend must not call it."""

    def __init__(self, max_model_len: int):
        self.llm_engine = SimpleNamespace(model_config=SimpleNamespace(max_model_len=max_model_len))

    def generate(self, *args, **kwargs):
        raise AssertionError("a row with no room left must not reach vLLM")


@pytest.fixture
def vllm_inputs_stub(monkeypatch):
    """Just enough of ``vllm`` for the backend's no-room branch to run without the package."""
    inputs = ModuleType("vllm.inputs")
    inputs.TokensPrompt = dict
    vllm = ModuleType("vllm")
    vllm.inputs = inputs
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.inputs", inputs)


def test_vllm_row_whose_prompt_fills_the_context_gets_a_masked_eos(tiny_model, vllm_inputs_stub):
    from rapo_trl.rollout.backends.vllm import VLLMBackend

    _, tok = tiny_model
    prompt = tok("a prompt that fills the whole context", add_special_tokens=False)["input_ids"]
    backend = VLLMBackend(_FullContextLLM(len(prompt)), tok)
    engine = HybridRolloutEngine(tok, backend, [], None, RolloutConfig(max_completion_length=16, max_turn_tokens=8))
    (row,) = engine.run([prompt])
    assert row.completion_ids == [tok.eos_token_id]
    assert row.env_mask == [0]
    assert row.logprobs == [0.0]
    assert [(s.kind, s.start, s.end) for s in row.segments if s.end > s.start] == [("end", 0, 1)]
    assert row.truncated


def _no_room_for_the_first_row(engine):
    """The first turn gives row 0 a budget of 0, as a backend does when the prompt leaves no room."""
    generate, calls = engine.backend.generate, []

    def tight(sequences, budgets, stops):
        calls.append(len(sequences))
        if len(calls) == 1:
            budgets = [0, *budgets[1:]]
        return generate(sequences, budgets, stops)

    engine.backend.generate = tight


def test_loss_ignores_the_eos_of_a_row_with_no_room(tiny_model_dir, tmp_path):
    trainer = rapo_trainer(tiny_model_dir, tmp_path)
    script(trainer)
    _no_room_for_the_first_row(trainer.rollout_engine)
    trainer.model.train()
    batch = trainer._generate_and_score_completions(batch_inputs())
    rows = trainer.last_rollout.rows
    assert rows[0].env_mask == [0]

    mask = batch["completion_mask"] * batch["tool_mask"]
    assert int(mask[0].sum()) == 0
    assert int(batch["num_items_in_batch"]) == sum(sum(r.env_mask) for r in rows) == int(mask.sum())

    loss, grads = loss_and_grads(trainer, batch)
    other = dict(batch, advantages=batch["advantages"].clone())
    other["advantages"][0] += 5.0  # row 0's advantage reaches the loss only through tokens it trains on
    other_loss, other_grads = loss_and_grads(trainer, other)
    assert torch.equal(loss, other_loss)
    assert all(torch.equal(grads[name], other_grads[name]) for name in grads)
