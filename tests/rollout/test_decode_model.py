"""The module the KV-cache loop decodes with: merged LoRA weights, the LM head's kernel, the decode result.

Decoding on the adapter folded into a copy of the weights must give the turns decoding through the adapter gives
(greedy ids identical, entropies to float noise), fold again exactly when the adapter changed, cost one copy of the
adapted weights and nothing else, and fall back to the adapter where folding would be wrong.
"""

from __future__ import annotations

import pytest
import torch

from rapo_trl.rollout import TransformersBackend
from rapo_trl.rollout.backends.decode_model import HEAD_KERNELS, DecodeModel, head_logits, merge_unavailable
from rapo_trl.rollout.backends.kv_decode import DecodeResult, KVCacheDecoder
from tests.rollout.test_kv_decode import GREEDY, assert_same, chat, run_turns

peft = pytest.importorskip("peft")
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def with_lora(model, **settings):
    """``model`` with a LoRA adapter whose B is random (a fresh adapter's zero B would change nothing)."""
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS, init_lora_weights=False, **settings)
    lora = peft.get_peft_model(model, config)
    lora.eval()
    return lora


def prompts_of(tok):
    return [chat(tok, "What is 2 + 3?"), chat(tok, "What is 2 + 3?"), chat(tok, "Name a prime number above 20.")]


def turns(model, tok, budgets=(10, 10, 6), **backend_settings):
    backend = TransformersBackend(model, tok, GREEDY, **{"merged_weights": True, **backend_settings})
    return backend, run_turns(backend, tok, prompts_of(tok), list(budgets))


@pytest.mark.parametrize("kernel", HEAD_KERNELS)
@pytest.mark.parametrize("with_bias", [False, True])
def test_head_kernels_give_the_linear_layers_values(kernel, with_bias):
    torch.manual_seed(0)
    weight, hidden = torch.randn(5000, 96), torch.randn(16, 1, 96)
    bias = torch.randn(5000) if with_bias else None
    logits = head_logits(hidden, weight, bias, kernel)
    assert logits.shape == (16, 1, 5000)
    torch.testing.assert_close(logits, torch.nn.functional.linear(hidden, weight, bias), rtol=1e-5, atol=1e-5)
    expected = hidden.double() @ weight.double().T + (bias.double() if with_bias else 0)
    torch.testing.assert_close(logits.double(), expected, rtol=1e-5, atol=1e-4)


def test_an_unknown_head_kernel_is_refused():
    with pytest.raises(ValueError, match="unknown LM head kernel"):
        head_logits(torch.zeros(1, 4), torch.zeros(3, 4), None, "oneDNN")
    with pytest.raises(ValueError, match="unknown LM head kernel"):
        DecodeModel(head_kernel="oneDNN")


@pytest.mark.parametrize("kernel", HEAD_KERNELS)
def test_greedy_turns_on_merged_weights_match_the_adapter(tiny_model, kernel):
    model, tok = tiny_model
    lora = with_lora(model)
    merged, history = turns(lora, tok, head_kernel=kernel)
    assert merged.last_path == "kv_cache" and merged.decode_model.weights == "merged"
    adapter, through_adapter = turns(lora, tok, merged_weights=False, head_kernel="linear")
    assert adapter.decode_model.weights == "adapter"
    assert_same(history, through_adapter)
    with lora.disable_adapter():  # the adapter matters: without it the turns differ
        _, base = turns(lora, tok)
    assert [o.entropy_full for o in base[0]] != [o.entropy_full for o in history[0]]


def test_the_adapter_path_is_the_default_until_merged_weights_are_asked_for(tiny_model):
    model, tok = tiny_model
    lora = with_lora(model)
    default = TransformersBackend(lora, tok, GREEDY)
    run_turns(default, tok, prompts_of(tok), [3, 3, 3])
    assert default.decode_model.weights == "adapter" and default.decode_model.extra_bytes == 0
    backend, _ = turns(lora, tok, budgets=(3, 3, 3))
    assert backend.decode_model.weights == "merged" and backend.decode_model.merge_unavailable is None


def test_the_copy_is_folded_again_only_when_the_adapter_changed(tiny_model):
    model, tok = tiny_model
    lora = with_lora(model)
    backend, first = turns(lora, tok)
    folder = backend.decode_model
    assert folder.refreshes == 1  # three turns, one fold
    run_turns(backend, tok, prompts_of(tok), [4, 4, 4])
    assert folder.refreshes == 1
    trainable = [p for p in lora.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(trainable, lr=0.5)
    loss = lora(input_ids=torch.tensor([prompts_of(tok)[2]])).logits.float().pow(2).mean()
    loss.backward()
    optimizer.step()  # updates the adapter in place, as the trainer's optimizer does
    _, after = turns(lora, tok, merged_weights=False)
    history = run_turns(backend, tok, prompts_of(tok), [10, 10, 6])
    assert folder.refreshes == 2
    assert_same(history, after)
    assert [o.entropy_full for o in after[0]] != [o.entropy_full for o in first[0]]  # the update was seen


def test_the_copy_costs_the_adapted_weights_only(tiny_model):
    model, tok = tiny_model
    lora = with_lora(model)
    backend, _ = turns(lora, tok, budgets=(2, 2, 2))
    adapted = [m.get_base_layer().weight for m in lora.modules() if isinstance(m, peft.tuners.lora.layer.Linear)]
    assert len(adapted) == 7 * model.config.num_hidden_layers
    assert backend.decode_model.extra_bytes == sum(w.numel() * w.element_size() for w in adapted)
    copy = backend.decode_model.model_for(lora)
    shared = {p.data_ptr() for p in lora.parameters()}
    own = [p for p in copy.parameters() if p.data_ptr() not in shared]
    assert sum(p.numel() * p.element_size() for p in own) == backend.decode_model.extra_bytes
    assert not any(p.requires_grad for p in own)


def test_a_model_without_an_adapter_is_decoded_as_it_is(tiny_model):
    model, tok = tiny_model
    backend, history = turns(model, tok, head_kernel="linear")
    assert backend.decode_model.weights == "model"
    assert backend.decode_model.model_for(model) is model and backend.decode_model.extra_bytes == 0
    _, plain = turns(model, tok, reuse_kv=False)
    assert_same(history, plain)


def test_dora_keeps_the_adapter_path_and_says_why(tiny_model, caplog):
    model, tok = tiny_model
    lora = with_lora(model, use_dora=True)
    assert "variant" in merge_unavailable(lora)
    with caplog.at_level("WARNING"):
        backend, history = turns(lora, tok, merged_weights=True)
    assert backend.decode_model.weights == "adapter" and "not on merged weights" in caplog.text
    assert_same(history, turns(lora, tok, reuse_kv=False)[1])


def test_a_disabled_adapter_is_not_folded(tiny_model):
    model, tok = tiny_model
    lora = with_lora(model)
    with lora.disable_adapter():
        backend, history = turns(lora, tok)
        assert backend.decode_model.weights == "adapter"
        _, plain = turns(lora, tok, reuse_kv=False)
    assert_same(history, plain)


def test_bf16_merged_weights_stay_within_rounding_of_the_adapter(tiny_model):
    """In bf16 the fold rounds W + BA once to bf16 where the adapter path adds an fp32 LoRA product to a bf16
    product: the logits agree to three bf16 spacings (units in the last place) of the largest logit of their position,
    not bit for bit, so
    greedy turns can part where two tokens are that close (6 of 9 turns of ``turns`` were identical on the tiny
    model with seed 0)."""
    model, tok = tiny_model
    torch.manual_seed(0)
    lora = with_lora(model.to(torch.bfloat16))  # PEFT keeps the adapter in fp32 (autocast_adapter_dtype)
    ids = torch.tensor([prompts_of(tok)[2]])
    folder = DecodeModel(merged_weights=True, head_kernel="linear")
    with torch.no_grad():
        merged = folder.model_for(lora)(input_ids=ids).logits.float()
        adapter = lora(input_ids=ids).logits.float()
        with lora.disable_adapter():
            base = lora(input_ids=ids).logits.float()
    assert folder.weights == "merged" and all(f.weight.dtype == torch.bfloat16 for f in folder._folds)
    scale = adapter.abs().amax(dim=-1, keepdim=True)
    spacing = torch.exp2(torch.floor(torch.log2(scale)) - 7)  # bf16 keeps 8 significant bits
    assert ((merged - adapter).abs() <= 3 * spacing).all()  # 2.1 spacings at most with this seed
    assert ((base - adapter).abs() / spacing).median() > 20  # the adapter moves them far more (50 here)


def test_the_decoder_returns_each_steps_rows(tiny_model):
    model, tok = tiny_model
    backend = TransformersBackend(model, tok, GREEDY)
    config = backend._generation_config(model, 6, [])
    result = KVCacheDecoder().generate(model, prompts_of(tok), [6, 2, 4], config, [], None, set())
    assert isinstance(result, DecodeResult)
    assert [len(ids) for ids in result.token_ids] == [6, 2, 4]
    assert [r.tolist() for r in result.step_rows] == [[0, 1, 2], [0, 1, 2], [0, 2], [0, 2], [0], [0]]


def test_switching_to_an_adapter_on_other_layers_folds_what_peft_runs(tiny_model):
    """A second adapter that targets fewer layers and has its own modules_to_save copy of the head: after
    ``set_adapter`` the same folder decodes it (layers without it keep their frozen weight, the copy's head is the
    new adapter's), as PEFT's forward does, instead of a KeyError or the former adapter's head."""
    model, tok = tiny_model
    torch.manual_seed(0)
    lora = with_lora(model, modules_to_save=["lm_head"])
    lora.add_adapter("other", peft.LoraConfig(r=4, target_modules=["q_proj"], init_lora_weights=False,
                                              modules_to_save=["lm_head"]))
    with torch.no_grad():
        lora.base_model.model.lm_head.modules_to_save["other"].weight.mul_(-1.0)  # unlike the default's copy
    lora.eval()
    ids = torch.tensor([prompts_of(tok)[2]])
    folder = DecodeModel(merged_weights=True)
    with torch.no_grad():
        for adapter in ("default", "other", "default"):
            lora.set_adapter(adapter)
            merged, through_adapter = folder.model_for(lora)(input_ids=ids).logits, lora(input_ids=ids).logits
            assert folder.weights == "merged"
            torch.testing.assert_close(merged, through_adapter, rtol=1e-5, atol=1e-4)
