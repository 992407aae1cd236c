"""The KV-cache loop on a real CUDA GPU: the same greedy tokens as ``generate`` in fp32, batched rows leaving at
their own budget, stop strings cut as on the CPU; bf16 takes the cached path. Skipped without a GPU."""

from __future__ import annotations

import pytest
import torch

from rapo_trl.rollout import TransformersBackend
from tests.rollout.test_kv_decode import GREEDY, assert_same, chat, run_turns

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.fixture
def cuda_model(tiny_model):
    model, tok = tiny_model
    return model.to("cuda"), tok


def test_greedy_turns_on_cuda_match_generate(cuda_model):
    model, tok = cuda_model
    prompts = [chat(tok, "What is 2 + 3?"), chat(tok, "What is 2 + 3?"), chat(tok, "Name a prime number above 20.")]
    cached, plain = TransformersBackend(model, tok, GREEDY), TransformersBackend(model, tok, GREEDY, reuse_kv=False)
    history = run_turns(cached, tok, prompts, [12, 12, 7])
    assert cached.last_path == "kv_cache" and cached.kv_cache_unavailable is None
    assert_same(history, run_turns(plain, tok, prompts, [12, 12, 7]))
    assert cached.decoder.stats["decode_row_steps"] == 3 * (12 + 12 + 7)  # rows leave at their own budget


def test_stop_strings_on_cuda(cuda_model):
    model, tok = cuda_model
    prompts = [chat(tok, "Count to five."), chat(tok, "Say hello.")]
    [first, _] = TransformersBackend(model, tok, GREEDY, reuse_kv=False).generate(prompts, [16, 16], [])
    stop = tok.decode(first.token_ids[3:5])
    assert stop.strip()
    cached, plain = TransformersBackend(model, tok, GREEDY), TransformersBackend(model, tok, GREEDY, reuse_kv=False)
    history = run_turns(cached, tok, prompts, [16, 16], [stop], turns=2)
    assert_same(history, run_turns(plain, tok, prompts, [16, 16], [stop], turns=2))
    assert history[0][0].stop_string == stop


def test_bf16_on_cuda_takes_the_cached_path_with_a_wide_batch(cuda_model):
    model, tok = cuda_model
    model.to(torch.bfloat16)
    prompts = [chat(tok, f"What is {i} + 3?") for i in range(32)]
    backend = TransformersBackend(model, tok, GREEDY)
    history = run_turns(backend, tok, prompts, [10] * 32, turns=2)
    assert backend.last_path == "kv_cache"
    assert all(len(out.token_ids) <= 10 for turn in history for out in turn)
    assert backend.decoder.stats["reused_tokens"] > 0
