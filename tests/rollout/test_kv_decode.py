"""The transformers backend's KV-cached sampling loop, pinned against plain ``model.generate``.

Greedy decoding on the tiny model must give the same ids, finish reasons and (to float noise) the same
entropies whichever path runs, over several turns with forced tokens appended between them, with rows
sharing a prompt, rows of different budgets and a stop string.
"""

from __future__ import annotations

import pytest
import torch

from rapo_trl.rollout import SamplingSettings, TransformersBackend
from rapo_trl.rollout.backends.transformers import _EntropyRecorder
from rapo_trl.rollout.entropy import token_entropies

GREEDY = SamplingSettings(do_sample=False)
SYSTEM = "You are a careful assistant. Think step by step, run code in python tags, and answer in answer tags."


def chat(tokenizer, question):
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False))


def encode(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def run_turns(backend, tokenizer, prompts, budgets, stop_strings=(), turns=3, rollout=True):
    """Turns of a fake rollout: after each turn the row's sampled ids and a forced block are appended."""
    forced = encode(tokenizer, "\n<result>\n42\n</result>\n")
    seqs, history = [list(p) for p in prompts], []
    if rollout:
        backend.begin_rollout()
    for _ in range(turns):
        outs = backend.generate(seqs, budgets, list(stop_strings))
        history.append(outs)
        seqs = [s + o.token_ids + forced for s, o in zip(seqs, outs)]
    if rollout:
        backend.end_rollout()
    return history


def assert_same(history_a, history_b):
    for turn_a, turn_b in zip(history_a, history_b, strict=True):
        for a, b in zip(turn_a, turn_b, strict=True):
            assert a.token_ids == b.token_ids
            assert (a.finish, a.stop_string) == (b.finish, b.stop_string)
            assert a.entropy_full == pytest.approx(b.entropy_full, abs=1e-4)
            assert a.entropy_topk == pytest.approx(b.entropy_topk, abs=1e-5)
            assert len(a.entropy_full) == len(a.entropy_topk) == len(a.token_ids)


def test_greedy_turns_match_generate_and_reuse_the_cache(tiny_model):
    model, tok = tiny_model
    prompts = [chat(tok, "What is 2 + 3?"), chat(tok, "What is 2 + 3?"), chat(tok, "Name a prime number above 20.")]
    cached, plain = TransformersBackend(model, tok, GREEDY), TransformersBackend(model, tok, GREEDY, reuse_kv=False)
    history = run_turns(cached, tok, prompts, [12, 12, 7])
    assert cached.last_path == "kv_cache"
    assert_same(history, run_turns(plain, tok, prompts, [12, 12, 7]))
    assert plain.last_path == "generate"
    stats = cached.decoder.stats
    # Turns 2 and 3 reuse each row's cache: only the forced block and the last sampled token are prefilled.
    forced = len(encode(tok, "\n<result>\n42\n</result>\n"))
    assert stats["reused_tokens"] > 0
    prompt_tokens = len(prompts[0]) + len(prompts[2]) - 1  # the shared system prompt counted once
    assert stats["prefilled_tokens"] <= prompt_tokens + 2 * 3 * (forced + 1)
    # Rows leave the batch at their own budget: the 7-token row is not decoded for 12 steps.
    assert stats["decode_row_steps"] == 3 * (12 + 12 + 7)


def test_stop_string_cut_matches_generate(tiny_model):
    model, tok = tiny_model
    prompts = [chat(tok, "Count to five."), chat(tok, "Say hello.")]
    [first, _] = TransformersBackend(model, tok, GREEDY, reuse_kv=False).generate(prompts, [16, 16], [])
    stop = tok.decode(first.token_ids[3:5])  # text the model writes greedily: it must stop there
    assert stop.strip()
    cached, plain = TransformersBackend(model, tok, GREEDY), TransformersBackend(model, tok, GREEDY, reuse_kv=False)
    history = run_turns(cached, tok, prompts, [16, 16], [stop], turns=2)
    assert_same(history, run_turns(plain, tok, prompts, [16, 16], [stop], turns=2))
    assert history[0][0].finish == "stop" and history[0][0].stop_string == stop
    assert len(history[0][0].token_ids) <= 5


def test_sampling_processors_come_from_the_generation_config(tiny_model):
    """top_k=1 sampling is greedy, and a repetition penalty sees the whole sequence, in both paths."""
    model, tok = tiny_model
    prompts = [chat(tok, "Repeat after me: la la la la."), chat(tok, "What is 7 * 6?")]
    top1 = SamplingSettings(do_sample=True, temperature=0.7, top_k=1)
    torch.manual_seed(0)
    assert_same(run_turns(TransformersBackend(model, tok, top1), tok, prompts, [10, 10], turns=2),
                run_turns(TransformersBackend(model, tok, GREEDY, reuse_kv=False), tok, prompts, [10, 10], turns=2))
    penalised = SamplingSettings(do_sample=False, repetition_penalty=1.5)
    with_penalty = run_turns(TransformersBackend(model, tok, penalised), tok, prompts, [10, 10], turns=2)
    assert_same(with_penalty,
                run_turns(TransformersBackend(model, tok, penalised, reuse_kv=False), tok, prompts, [10, 10], turns=2))
    unpenalised = run_turns(TransformersBackend(model, tok, GREEDY), tok, prompts, [10, 10], turns=1)
    # The recorder sits after the penalty (as in generate), so the penalty shows in the entropies.
    assert with_penalty[0][0].entropy_full != pytest.approx(unpenalised[0][0].entropy_full, abs=1e-4)


def test_sampled_rows_are_reproducible_and_distinct(tiny_model):
    model, tok = tiny_model
    prompts = [chat(tok, "Tell me a story.")] * 4
    backend = TransformersBackend(model, tok, SamplingSettings(temperature=1.0))
    torch.manual_seed(1)
    first = run_turns(backend, tok, prompts, [12] * 4, turns=2)
    torch.manual_seed(1)
    again = run_turns(backend, tok, prompts, [12] * 4, turns=2)
    assert [[o.token_ids for o in t] for t in first] == [[o.token_ids for o in t] for t in again]
    assert len({tuple(o.token_ids) for o in first[0]}) > 1  # identical prompts prefilled once, sampled apart


def test_cache_kept_only_inside_a_rollout(tiny_model):
    model, tok = tiny_model
    backend = TransformersBackend(model, tok, GREEDY)
    run_turns(backend, tok, [chat(tok, "Hi.")], [6], turns=2, rollout=False)
    assert backend.decoder.stats["reused_tokens"] == 0  # weights may have changed between calls
    run_turns(backend, tok, [chat(tok, "Hi.")], [6], turns=2, rollout=True)
    assert backend.decoder.stats["reused_tokens"] > 0
    assert backend.decoder._entries == []  # end_rollout frees the caches


def test_a_cache_is_used_only_up_to_the_first_differing_token(tiny_model):
    model, tok = tiny_model
    prompt = chat(tok, "What is 12 + 30?")
    cached, plain = TransformersBackend(model, tok, GREEDY), TransformersBackend(model, tok, GREEDY, reuse_kv=False)
    cached.begin_rollout()
    [out] = cached.generate([prompt], [8], [])
    edited = prompt[:-4] + [prompt[-3]] + prompt[-3:] + out.token_ids  # differs 4 tokens before the prompt's end
    [again] = cached.generate([edited], [8], [])
    cached.end_rollout()
    assert again.token_ids == plain.generate([edited], [8], [])[0].token_ids


def test_patched_generate_returning_a_tensor(tiny_model):
    """A wrapped generate (as in TRL's tests) is used as is, and may return the bare tensor of sequences."""
    model, tok = tiny_model
    prompts = [chat(tok, "What is 2 + 3?"), chat(tok, "Say hi.")]
    expected = TransformersBackend(model, tok, GREEDY, reuse_kv=False).generate(prompts, [6, 9], [])
    original = model.generate

    def wrapped(*args, **kwargs):
        kwargs["generation_config"].return_dict_in_generate = False
        return original(*args, **kwargs)

    model.generate = wrapped
    backend = TransformersBackend(model, tok, GREEDY)
    outs = backend.generate(prompts, [6, 9], [])
    assert backend.last_path == "generate"
    assert_same([outs], [expected])

    def ignores_processors(input_ids, attention_mask, generation_config, logits_processor=None, **kwargs):
        return original(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=6, do_sample=False,
                        pad_token_id=tok.pad_token_id)

    model.generate = ignores_processors
    outs = TransformersBackend(model, tok, GREEDY).generate(prompts, [6, 6], [])
    assert [o.token_ids for o in outs] == [e.token_ids[:6] for e in expected]
    assert all(o.entropy_full == [] and o.entropy_topk == [] for o in outs)  # the recorder never ran


def test_entropy_recorder_stays_on_the_device():
    recorder = _EntropyRecorder(top_k=3)
    scores = torch.randn(2, 11, device="meta")  # any copy to the CPU would raise here
    recorder(None, scores)
    recorder(None, scores)
    assert all(t.device.type == "meta" for t in recorder.full + recorder.topk)


def test_entropy_table_places_each_step_on_its_rows():
    recorder = _EntropyRecorder(top_k=3)
    logits = [torch.randn(3, 11), torch.randn(2, 11), torch.randn(1, 11)]
    rows = [torch.tensor([0, 1, 2]), torch.tensor([0, 2]), torch.tensor([2])]
    for step_logits in logits:
        recorder(None, step_logits)
    full, topk = recorder.table(3, rows)
    assert full.shape == topk.shape == (3, 3)
    expected_full, expected_topk = token_entropies(logits[1], 3)
    assert full[[0, 2], 1].tolist() == pytest.approx(expected_full.tolist())
    assert topk[[0, 2], 1].tolist() == pytest.approx(expected_topk.tolist())
    assert full[2, 2].item() == pytest.approx(token_entropies(logits[2], 3)[0].item())
    assert full[1, 1].item() == 0.0 and full[0, 2].item() == 0.0  # rows that had stopped


def test_engine_opens_and_closes_the_cache_around_a_rollout(tiny_model):
    from rapo_trl.rollout import HybridRolloutEngine, RolloutConfig

    model, tok = tiny_model
    calls = []

    class Spy(TransformersBackend):
        def begin_rollout(self):
            calls.append("begin")
            super().begin_rollout()

        def generate(self, *args):
            calls.append(("generate", self.decoder._keep))
            return super().generate(*args)

        def end_rollout(self):
            calls.append("end")
            super().end_rollout()

    backend = Spy(model, tok, GREEDY)
    engine = HybridRolloutEngine(tok, backend, [], None, RolloutConfig(max_completion_length=8, max_turn_tokens=8))
    [row] = engine.run([chat(tok, "Hi.")])
    assert calls == ["begin", ("generate", True), "end"]
    assert not backend.decoder._keep and backend.decoder._entries == []
    assert row.completion_ids == TransformersBackend(model, tok, GREEDY, reuse_kv=False).generate(
        [chat(tok, "Hi.")], [8], [])[0].token_ids


@pytest.mark.parametrize("reuse_kv", [True, False])
def test_extra_logits_processors_run_before_the_recorder(tiny_model, reuse_kv):
    from transformers import LogitsProcessor

    class Force(LogitsProcessor):
        def __call__(self, input_ids, scores):
            scores[:, :] = -float("inf")
            scores[:, 7] = 0.0
            return scores

    model, tok = tiny_model
    backend = TransformersBackend(model, tok, SamplingSettings(temperature=1.0), logits_processor=[Force()],
                                  reuse_kv=reuse_kv)
    outs = backend.generate([chat(tok, "Hi."), chat(tok, "Say hello.")], [5, 3], [])
    assert [o.token_ids for o in outs] == [[7] * 5, [7] * 3]
    assert all(e == 0.0 for o in outs for e in o.entropy_full)  # the recorder saw the forced distribution


def test_lora_model_takes_the_cached_path(tiny_model):
    peft = pytest.importorskip("peft")
    model, tok = tiny_model
    lora = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    prompts = [chat(tok, "What is 2 + 3?"), chat(tok, "Say hi.")]
    cached = TransformersBackend(lora, tok, GREEDY)
    history = run_turns(cached, tok, prompts, [8, 8], turns=2)
    assert cached.last_path == "kv_cache" and cached.decoder.stats["reused_tokens"] > 0
    assert_same(history, run_turns(TransformersBackend(lora, tok, GREEDY, reuse_kv=False), tok, prompts, [8, 8],
                                   turns=2))
    with lora.disable_adapter():  # the adapter is live in the cached path (the random LoRA changes the output)
        base = run_turns(TransformersBackend(lora, tok, GREEDY), tok, prompts, [8, 8], turns=1)
    assert [o.entropy_full for o in base[0]] != [o.entropy_full for o in history[0]]


@pytest.mark.parametrize("adapter", ["PromptTuningConfig", "PrefixTuningConfig"], ids=["prompt_tuning", "prefix_tuning"])
def test_prompt_learning_adapter_decodes_with_generate(tiny_model, adapter):
    # PEFT's forward adds the virtual tokens (prompt tuning) or puts its own cache in place of the one passed (prefix
    # tuning) on every call, so the loop's cached calls would see the virtual tokens again or lose the prompt; only
    # PEFT's generate handles them.
    peft = pytest.importorskip("peft")
    model, tok = tiny_model
    tuned = peft.get_peft_model(model, getattr(peft, adapter)(task_type=peft.TaskType.CAUSAL_LM, num_virtual_tokens=3))
    prompts = [chat(tok, "What is 2 + 3?"), chat(tok, "Say hi.")]
    backend = TransformersBackend(tuned, tok, GREEDY)
    history = run_turns(backend, tok, prompts, [8, 8], turns=2)
    assert_same(history, run_turns(TransformersBackend(tuned, tok, GREEDY, reuse_kv=False), tok, prompts, [8, 8],
                                   turns=2))
    assert backend.last_path == "generate"
    assert "virtual tokens" in backend.kv_cache_unavailable


def test_preallocated_cache_gives_the_same_turns_as_a_growing_one(tiny_model):
    model, tok = tiny_model
    prompts = [chat(tok, "What is 2 + 3?"), chat(tok, "What is 2 + 3?"), chat(tok, "Name a prime number above 20.")]
    histories = []
    for preallocate in (True, False):
        backend = TransformersBackend(model, tok, SamplingSettings(temperature=1.0))
        backend.decoder.preallocate = preallocate
        torch.manual_seed(0)
        histories.append(run_turns(backend, tok, prompts, [12, 9, 7]))
    assert_same(*histories)


def test_preallocated_layer_writes_in_place_and_grows_when_full():
    from transformers.cache_utils import DynamicLayer

    from rapo_trl.rollout.backends.kv_decode import _PreallocatedLayer

    layer = DynamicLayer()
    first = torch.randn(2, 3, 5, 4)
    layer.update(first, -first)
    _PreallocatedLayer.adopt(layer, room=2)
    buffer = layer._key_buffer
    steps = [torch.randn(2, 3, 1, 4) for _ in range(4)]
    for i, step in enumerate(steps):
        keys, values = layer.update(step, -step)
        if i < 2:
            assert layer._key_buffer is buffer  # written in place while there is room
    expected = torch.cat([first, *steps], dim=-2)
    assert torch.equal(keys, expected) and torch.equal(values, -expected)
    assert layer.get_seq_length() == 9 and layer._key_buffer.shape[-2] >= 9
    layer.batch_select_indices(torch.tensor([1]))
    assert torch.equal(layer.keys, expected[1:]) and layer.get_seq_length() == 9


def _forward_declaring(model, cache_name):
    """Replace ``model.forward`` with one that declares the cache under ``cache_name`` (or under no known name when
    None) and hands it on under the name the installed transformers takes; records the names it was called with."""
    import inspect

    from rapo_trl.rollout.backends.kv_decode import CACHE_ARGUMENTS

    original = model.forward
    native = next(n for n in CACHE_ARGUMENTS if n in inspect.signature(original).parameters)
    declared = cache_name or "kv_state"
    calls = []

    def forward(input_ids=None, attention_mask=None, position_ids=None, use_cache=None, logits_to_keep=0, **kwargs):
        calls.append(sorted(n for n in (*CACHE_ARGUMENTS, "kv_state") if n in kwargs))
        cache = kwargs.pop(declared, None)
        for name in CACHE_ARGUMENTS:  # generate itself passes the installed name
            cache = kwargs.pop(name, cache)
        return original(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                        use_cache=use_cache, logits_to_keep=logits_to_keep, **{native: cache}, **kwargs)

    params = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=None)
              for n in ("input_ids", "attention_mask", "position_ids", declared, "use_cache", "logits_to_keep")]
    forward.__signature__ = inspect.Signature(params + [inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)])
    model.forward = forward
    return calls


@pytest.mark.parametrize("cache_name", ["cache", "past_key_values"])
def test_the_cache_goes_under_the_name_the_forward_takes(tiny_model, cache_name):
    """transformers 5.24 renamed the forward's ``past_key_values`` to ``cache``: the loop reads the name from the
    signature, passes the cache under it alone, and decodes the same tokens as generate."""
    from rapo_trl.rollout.backends.kv_decode import cache_argument

    model, tok = tiny_model
    prompts = [chat(tok, "What is 2 + 3?"), chat(tok, "Name a prime number above 20.")]
    reference = run_turns(TransformersBackend(model, tok, GREEDY, reuse_kv=False), tok, prompts, [10, 6])
    calls = _forward_declaring(model, cache_name)
    assert cache_argument(model) == cache_name
    cached = TransformersBackend(model, tok, GREEDY)
    history = run_turns(cached, tok, prompts, [10, 6])
    assert cached.last_path == "kv_cache" and cached.kv_cache_unavailable is None
    assert calls and all(names == [cache_name] for names in calls)
    assert cached.decoder.stats["reused_tokens"] > 0
    assert_same(history, reference)


def test_a_forward_without_a_known_cache_name_falls_back_and_says_so_once(tiny_model, caplog):
    from rapo_trl.rollout.backends.kv_decode import kv_decode_unavailable

    model, tok = tiny_model
    prompts = [chat(tok, "What is 2 + 3?")]
    reference = run_turns(TransformersBackend(model, tok, GREEDY, reuse_kv=False), tok, prompts, [8])
    _forward_declaring(model, None)
    reason = kv_decode_unavailable(model)
    assert reason is not None and "kv_state" in reason and "'cache'" in reason and "'past_key_values'" in reason
    backend = TransformersBackend(model, tok, GREEDY)
    with caplog.at_level("WARNING", logger="rapo_trl.rollout.backends.transformers"):
        history = run_turns(backend, tok, prompts, [8], turns=3)
    assert backend.last_path == "generate" and backend.kv_cache_unavailable == reason
    warnings = [r.getMessage() for r in caplog.records if "KV-cache loop" in r.getMessage()]
    assert len(warnings) == 1 and reason in warnings[0]  # one line for three turns, naming the cause
    assert_same(history, reference)


def test_every_fallback_cause_is_named(tiny_model):
    """Each condition that keeps the loop off has its own words (patched generate, encoder-decoder, a missing
    helper, the forward's arguments, the cache layer type)."""
    from unittest.mock import patch

    from transformers import DynamicCache

    from rapo_trl.rollout.backends.kv_decode import kv_decode_unavailable

    model, _ = tiny_model
    assert kv_decode_unavailable(model) is None
    with patch.object(type(model), "generate"):
        assert "patched" in kv_decode_unavailable(model)
    with patch.object(model.config, "is_encoder_decoder", True, create=True):
        assert "encoder-decoder" in kv_decode_unavailable(model)
    with patch.object(type(model), "_prepare_special_tokens", None):
        assert "_prepare_special_tokens" in kv_decode_unavailable(model)

    class SlidingLayer:
        pass

    with patch.object(DynamicCache, "__init__", lambda self, **_: setattr(self, "layers", [SlidingLayer()])):
        assert "SlidingLayer" in kv_decode_unavailable(model)


def test_decoding_on_cuda_leaves_cudnn_attention_out_and_restores_it():
    """On an H100 cuDNN's SDPA cost ~1.5 ms of host time per call while decoding; the backend decodes with the other
    kernels there (benchmarks/results/gpu.md) and leaves the global choice as it found it. The CPU is untouched."""
    from rapo_trl.rollout.backends.transformers import decode_attention

    assert torch.backends.cuda.cudnn_sdp_enabled()
    with decode_attention(torch.device("cuda", 0), avoid_cudnn=True):
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.mem_efficient_sdp_enabled() and torch.backends.cuda.flash_sdp_enabled()
    assert torch.backends.cuda.cudnn_sdp_enabled()
    for device, avoid in ((torch.device("cuda"), False), (torch.device("cpu"), True)):
        with decode_attention(device, avoid_cudnn=avoid):
            assert torch.backends.cuda.cudnn_sdp_enabled()


def test_the_backend_decodes_inside_the_attention_choice(tiny_model, monkeypatch):
    from rapo_trl.rollout.backends import transformers as backend_module

    model, tok = tiny_model
    seen = []
    real = backend_module.decode_attention
    monkeypatch.setattr(backend_module, "decode_attention",
                        lambda device, avoid: seen.append((device.type, avoid)) or real(device, avoid))
    TransformersBackend(model, tok, GREEDY, avoid_cudnn_attention=False).generate([chat(tok, "Hi")], [2], [])
    TransformersBackend(model, tok, GREEDY).generate([chat(tok, "Hi")], [2], [])
    assert seen == [("cpu", False), ("cpu", True)]


def test_the_lm_head_reads_contiguous_rows_in_every_forward(tiny_model):
    """A wide prefill keeps only its last position's logits; the head must get those rows gathered, not a strided
    view: ``F.linear`` over a strided 3-D input runs a batched matmul on a copy of the head's weight per row (6 s at 16
    rows in bf16 on a CPU for SmolLM2, against 16 ms)."""
    model, tok = tiny_model
    seen = []
    hook = model.get_output_embeddings().register_forward_pre_hook(
        lambda module, args: seen.append((tuple(args[0].shape), args[0].is_contiguous()))
    )
    prompts = [chat(tok, "What is 2 + 3?"), chat(tok, "Name a prime number above 20."), chat(tok, "Say hello.")]
    try:
        run_turns(TransformersBackend(model, tok, GREEDY), tok, prompts, [6, 6, 6])
    finally:
        hook.remove()
    wide = [shape for shape, _ in seen if shape[0] > 1]
    assert wide, "no forward ran more than one row"
    assert all(contiguous for _, contiguous in seen), seen
    assert all(shape[1] == 1 for shape, _ in seen)  # one position's logits a row, prefill and decode alike


def test_options_of_the_models_generation_config_apply_in_both_paths(tiny_model):
    """generate fills the options a given config leaves unset from the model's generation_config (a checkpoint's
    generation_config.json); the loop must decode with the same ones. The base config is built as TRL's is."""
    from transformers import GenerationConfig

    model, tok = tiny_model
    model.generation_config.no_repeat_ngram_size = 2  # the tiny model repeats 2-grams greedily
    model.generation_config.forced_eos_token_id = tok.eos_token_id  # forced at the longest budget's last token
    base = GenerationConfig(do_sample=True, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    prompts = [chat(tok, "What is 2 + 3?"), chat(tok, "Say hello to me please now."), chat(tok, "Say hi.")]
    cached = run_turns(TransformersBackend(model, tok, GREEDY, generation_config=base), tok, prompts, [16, 16, 12])
    for turn in cached:
        for out in turn:
            pairs = list(zip(out.token_ids, out.token_ids[1:]))
            assert len(pairs) == len(set(pairs))
    assert [out.finish for out in cached[0]] == ["eos", "eos", "length"]
    assert_same(cached, run_turns(TransformersBackend(model, tok, GREEDY, generation_config=base, reuse_kv=False),
                                  tok, prompts, [16, 16, 12]))
