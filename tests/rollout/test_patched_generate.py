"""Which generate path runs, and how a turn's end is read.

The transformers backend decodes in its KV-cache loop unless ``model.generate`` was replaced; a replaced one runs
as is, wherever it was replaced, including a ``unittest.mock.patch`` of ``GenerationMixin.generate`` itself, as in
TRL's ``test_train_with_mask_truncated_completions`` (tests/test_trl_mask_truncated.py ports it). On both paths a
row that reaches the token budget without EOS is ``truncated`` (TRL masks it under ``mask_truncated_completions``);
a row ending in EOS, even in the budget's last slot, is ``finished`` and not truncated.
"""

from __future__ import annotations

from unittest.mock import patch

import pytest
import torch
from transformers import GenerationMixin, LogitsProcessor

from rapo_trl.rollout import HybridRolloutEngine, RolloutConfig, SamplingSettings, TransformersBackend
from rapo_trl.rollout.backends.kv_decode import stock_generate, supports_kv_decode
from tests.helpers.fakes import prompts_for

MIXIN_GENERATE = "transformers.generation.utils.GenerationMixin.generate"
BASE = 100  # ordinary tokens of the tiny vocabulary (0-2 are special)


def trl_rows(eos: int, pad: int) -> list[list[int]]:
    """The three rows of TRL's fake generate (tiny-vocabulary ids)."""
    return [
        [BASE + i for i in range(1, 9)],  # no EOS: truncated
        [BASE + 9, BASE + 10, BASE + 11, eos, pad, pad, pad, pad],  # EOS, then padding
        [BASE + 12, BASE + 13, BASE + 14, BASE + 15, BASE + 16, BASE + 17, BASE + 18, eos],  # EOS in the last slot
    ]


def engine_for(model, tokenizer, **config):
    settings = dict(max_completion_length=8, retrieve_prob=0.0)
    settings.update(config)
    return HybridRolloutEngine(tokenizer, TransformersBackend(model, tokenizer), [], None, RolloutConfig(**settings))


def test_stock_model_takes_the_kv_cache_path(tiny_model):
    model, _ = tiny_model
    assert stock_generate(model) and supports_kv_decode(model)


@pytest.mark.parametrize("autospec", [False, True], ids=["mock", "autospec"])
def test_generate_patched_on_generation_mixin_is_detected(tiny_model, autospec):
    """``type(model).generate is GenerationMixin.generate`` holds under this patch (both are the mock): the check
    compares with transformers' own function instead."""
    model, _ = tiny_model
    with patch(MIXIN_GENERATE, autospec=autospec):
        assert type(model).generate is GenerationMixin.generate  # why the old check let the loop run
        assert not stock_generate(model) and not supports_kv_decode(model)
    assert stock_generate(model) and supports_kv_decode(model)  # restored with the original


def test_generate_patched_on_the_class_or_the_instance_is_detected(tiny_model):
    model, _ = tiny_model
    with patch.object(type(model), "generate"):
        assert not supports_kv_decode(model)
    model.generate = lambda *args, **kwargs: None
    assert not supports_kv_decode(model)
    del model.generate
    assert supports_kv_decode(model)


def test_mocked_mixin_generate_runs_and_its_rows_are_read_like_trl(tiny_model):
    """TRL's fake: prompt + three fixed rows of max_completion_length ids. The mock runs (not the KV loop), the
    ids after the left-padded prompt are read, cut at EOS; the row without EOS is the only truncated one."""
    model, tok = tiny_model
    eos, pad = tok.eos_token_id, tok.pad_token_id
    rows = trl_rows(eos, pad)
    prompts = prompts_for(tok, 3)
    prompts[1] = prompts[1][:-3]  # rows of different lengths: the fake's rows follow the left padding

    def fake_generate(input_ids, **kwargs):
        return torch.cat([input_ids, torch.tensor(rows, device=input_ids.device)], dim=1)

    engine = engine_for(model, tok)
    with patch(MIXIN_GENERATE) as mock_generate:
        mock_generate.side_effect = fake_generate
        out = engine.run(prompts)
    assert mock_generate.call_count == 1
    assert engine.backend.last_path == "generate"
    assert [r.completion_ids for r in out] == [rows[0], rows[1][:4], rows[2]]
    assert [(r.truncated, r.finished) for r in out] == [(True, False), (False, True), (False, True)]
    assert [r.env_mask for r in out] == [[1] * 8, [1] * 4, [1] * 8]
    # TRL's own rule for mask_truncated_completions agrees with the engine's flag.
    assert [r.completion_ids[-1] not in (eos, pad) for r in out] == [r.truncated for r in out]


def test_turn_budget_without_eos_is_truncated_on_the_generate_path(tiny_model):
    """A step that reaches max_turn_tokens (below the total budget) without EOS ends the rollout, truncated."""
    model, tok = tiny_model
    engine = engine_for(model, tok, max_completion_length=32, max_turn_tokens=5)

    def fake_generate(input_ids, **kwargs):
        budget = kwargs["generation_config"].max_new_tokens
        return torch.cat([input_ids, torch.full((1, budget), BASE, device=input_ids.device)], dim=1)

    with patch(MIXIN_GENERATE, side_effect=fake_generate):
        (row,) = engine.run(prompts_for(tok, 1))
    assert row.completion_ids == [BASE] * 5 and row.truncated and not row.finished


class _EosAtLastSlot(LogitsProcessor):
    """Never samples EOS, except in rows holding ``marker`` in their prompt, where the ``at``-th sampled token is
    forced to be EOS."""

    def __init__(self, eos: int, marker: int, width: int, at: int):
        self.eos, self.marker, self.width, self.at = eos, marker, width, at

    def __call__(self, input_ids, scores):
        scores = scores.clone()
        scores[:, self.eos] = -float("inf")
        if input_ids.shape[1] - self.width == self.at - 1:
            marked = (input_ids[:, : self.width] == self.marker).any(dim=1)
            scores[marked] = -float("inf")
            scores[marked, self.eos] = 0.0
        return scores


@pytest.mark.parametrize("reuse_kv", [True, False], ids=["kv_cache", "generate"])
def test_budget_without_eos_is_truncated_and_eos_in_the_last_slot_is_not(tiny_model, reuse_kv):
    """The real sampling paths (no mock): same semantics in the KV loop and in ``model.generate``."""
    model, tok = tiny_model
    eos = tok.eos_token_id
    prompts = prompts_for(tok, 2)
    marker = next(t for t in prompts[1] if t not in prompts[0])
    width = max(len(p) for p in prompts)
    processor = _EosAtLastSlot(eos, marker, width, at=8)
    backend = TransformersBackend(model, tok, SamplingSettings(do_sample=True), reuse_kv=reuse_kv,
                                  logits_processor=[processor])
    engine = HybridRolloutEngine(tok, backend, [], None, RolloutConfig(
        max_completion_length=8, retrieve_prob=0.0))
    torch.manual_seed(0)
    truncated, ended = engine.run(prompts)
    assert backend.last_path == ("kv_cache" if reuse_kv else "generate")
    assert len(truncated.completion_ids) == 8 and eos not in truncated.completion_ids
    assert truncated.truncated and not truncated.finished
    assert len(ended.completion_ids) == 8 and ended.completion_ids[-1] == eos and eos not in ended.completion_ids[:-1]
    assert ended.finished and not ended.truncated
