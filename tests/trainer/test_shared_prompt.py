"""The group's prompt once in the loss: equal to TRL's row-by-row forward, and actually run once."""

from __future__ import annotations

import contextlib
import functools

import pytest
import torch
from peft import LoraConfig, PrefixTuningConfig, PromptTuningConfig, TaskType
from transformers import AutoTokenizer

import rapo_trl.trainer.shared_prompt as shared_prompt_module
import rapo_trl.trainer.trainer as trainer_module
from rapo_trl.config import RAPOConfig
from rapo_trl.hardware import cpu_computes_bf16
from rapo_trl.padding import trim_padding_columns
from rapo_trl.trainer import RAPOTrainer
from rapo_trl.trainer.shared_prompt import (
    distinct_prompts,
    rows_in_generation_order,
    shared_prompt_unavailable,
)
from tests.helpers.fakes import EchoTool, FixedStore
from tests.helpers.trainers import (
    batch_inputs,
    common_args,
    dataset,
    loss_and_grads,
    rapo_trainer,
    script,
    sevens,
)

SHIFTED = dict(store=FixedStore(), retrieve_prob=1.0, num_hybrid_generations=2, importance_shaping_weight=1.0)
# Measured on the tiny model (fp32): the loss equal, gradients at most 3e-8 apart.
LOSS_ATOL, GRAD_ATOL, GRAD_RTOL = 1e-7, 2e-7, 1e-4


def test_distinct_prompts_groups_rows_by_prompt_and_padding():
    ids = torch.tensor([[0, 5, 6, 1], [0, 5, 6, 2], [7, 5, 6, 3], [0, 5, 6, 4]])
    mask = torch.tensor([[0, 1, 1, 1], [0, 1, 1, 1], [1, 1, 1, 1], [0, 1, 1, 1]])
    first, inverse = distinct_prompts(ids, mask, prompt_len=3)
    assert inverse.tolist()[0] == inverse.tolist()[1] == inverse.tolist()[3] != inverse.tolist()[2]
    assert sorted(first.tolist()) == [0, 2]  # the first row of each prompt
    padded = mask.clone()
    padded[1, 0] = 0
    other = ids.clone()
    other[1, 0] = 9  # a different id under padding is the same prompt
    assert distinct_prompts(other, padded, prompt_len=3)[1].tolist() == inverse.tolist()
    assert distinct_prompts(ids[[0, 2]], mask[[0, 2]], prompt_len=3) is None  # every prompt its own
    assert distinct_prompts(ids, mask, prompt_len=1) is None  # no prompt prefix to run before the last token


@contextlib.contextmanager
def prompt_forward(shared: bool):
    """The loss forward as the trainer runs it (``shared``), or TRL's row-by-row forward in its place."""
    with pytest.MonkeyPatch.context() as patch:
        if not shared:
            patch.setattr(trainer_module, "scores_with_shared_prompts", lambda *args, **kwargs: None)
        yield


def _scored(trainer):
    script(trainer)
    trainer.model.train()
    return trainer._generate_and_score_completions(batch_inputs())


@pytest.mark.parametrize("settings", [{}, SHIFTED], ids=["plain", "shaped_ratio"])
def test_loss_and_gradients_equal_the_row_by_row_forward(tiny_model_dir, tmp_path, settings):
    results = {}
    for share in (True, False):
        trainer = rapo_trainer(tiny_model_dir, tmp_path / str(share), **settings)
        with prompt_forward(share):
            results[share] = loss_and_grads(trainer, _scored(trainer))
    (loss, grads), (row_loss, row_grads) = results[True], results[False]
    assert loss != 0 and torch.allclose(loss, row_loss, atol=LOSS_ATOL)
    assert grads.keys() == row_grads.keys() and len(grads) > 10
    for name, grad in grads.items():
        assert torch.allclose(grad, row_grads[name], atol=GRAD_ATOL, rtol=GRAD_RTOL), name
    assert any(g.abs().max() > 1e-4 for g in grads.values())  # the comparison is over real gradients


def _lora_trainer(tiny_model_dir, tmp_path, **settings):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    args = RAPOConfig(**common_args(tmp_path, **settings), max_turn_tokens=32)
    return RAPOTrainer(str(tiny_model_dir), sevens, args=args, train_dataset=dataset(), processing_class=tok,
                       tools=[EchoTool()], peft_config=LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))


def test_lora_gradients_equal_the_row_by_row_forward(tiny_model_dir, tmp_path):
    results = {}
    for share in (True, False):
        trainer = _lora_trainer(tiny_model_dir, tmp_path / str(share))
        with prompt_forward(share):
            results[share] = loss_and_grads(trainer, _scored(trainer))
    (loss, grads), (row_loss, row_grads) = results[True], results[False]
    assert torch.allclose(loss, row_loss, atol=LOSS_ATOL)
    assert grads and all("lora_" in name for name in grads)
    for name, grad in grads.items():
        assert torch.allclose(grad, row_grads[name], atol=GRAD_ATOL, rtol=GRAD_RTOL), name


@pytest.mark.parametrize("adapter", [PromptTuningConfig, PrefixTuningConfig], ids=["prompt_tuning", "prefix_tuning"])
def test_prompt_learning_adapters_score_as_row_by_row(tiny_model_dir, tmp_path, adapter):
    # Their forward adds virtual tokens (prompt tuning) or a cache of its own (prefix tuning) on every call, so the
    # rows' forward on the prompt's cache would see them twice or not see the prompt at all.
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    results = {}
    for share in (True, False):
        args = RAPOConfig(**common_args(tmp_path / str(share)), max_turn_tokens=32)
        trainer = RAPOTrainer(str(tiny_model_dir), sevens, args=args, train_dataset=dataset(), processing_class=tok,
                              tools=[EchoTool()], peft_config=adapter(task_type=TaskType.CAUSAL_LM, num_virtual_tokens=3))
        with prompt_forward(share):
            results[share] = loss_and_grads(trainer, _scored(trainer))
    (loss, grads), (row_loss, row_grads) = results[True], results[False]
    assert torch.allclose(loss, row_loss, atol=LOSS_ATOL)
    assert grads.keys() == row_grads.keys() and grads
    for name, grad in grads.items():
        assert torch.allclose(grad, row_grads[name], atol=GRAD_ATOL, rtol=GRAD_RTOL), name


def test_each_distinct_prompt_runs_once(tiny_model_dir, tmp_path, monkeypatch):
    trainer = rapo_trainer(tiny_model_dir, tmp_path)
    batch = _scored(trainer)
    model = trainer.model
    calls = []
    forward = model.forward

    @functools.wraps(forward)  # the signature says where the cache goes
    def spy(*args, **kwargs):
        calls.append((kwargs["input_ids"].shape, kwargs.get("fused_lm_head", False)))
        return forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", spy)
    loss_and_grads(trainer, batch)
    trimmed = trim_padding_columns(batch)
    prompt_len, completion_len = trimmed["prompt_ids"].shape[1], trimmed["completion_ids"].shape[1]
    rows = batch["prompt_ids"].shape[0]
    # One group: its prompt (minus the last token) once, then every row's last prompt token and completion.
    assert calls == [((1, prompt_len - 1), False), ((rows, completion_len + 1), True)]


def test_falls_back_to_trls_forward_where_the_cache_cannot_serve(tiny_model_dir, tmp_path, monkeypatch, caplog):
    trainer = rapo_trainer(tiny_model_dir, tmp_path)
    batch = _scored(trainer)
    assert shared_prompt_unavailable(trainer.model) is None
    trainer.model.gradient_checkpointing_enable()
    assert "gradient checkpointing" in shared_prompt_unavailable(trainer.model)
    used = []
    monkeypatch.setattr(shared_prompt_module, "score_with_shared_prompt", lambda *a, **k: used.append(1))
    monkeypatch.setattr(shared_prompt_module, "_SAID", set())
    with caplog.at_level("WARNING", logger="rapo_trl.trainer"):
        loss, _ = loss_and_grads(trainer, batch)
        loss_and_grads(trainer, batch)
    assert not used and torch.isfinite(loss)
    said = [r.message for r in caplog.records if "shared prompt forward is off" in r.message]
    assert len(said) == 1 and "gradient checkpointing" in said[0]  # said, once: never silently off


def test_micro_batches_of_one_generation_are_put_back_in_generation_order():
    rows = torch.arange(6)
    shuffled = [{"rapo_row": rows[[4, 1, 5]], "ids": rows[[4, 1, 5]] * 10, "names": ["e", "b", "f"],
                 "scale": torch.tensor(2.0), "absent": None},
                {"rapo_row": rows[[0, 3, 2]], "ids": rows[[0, 3, 2]] * 10, "names": ["a", "d", "c"],
                 "scale": torch.tensor(2.0), "absent": None}]
    first, second = rows_in_generation_order(shuffled)
    assert first["rapo_row"].tolist() == [0, 1, 2] and second["rapo_row"].tolist() == [3, 4, 5]
    assert first["ids"].tolist() == [0, 10, 20] and second["names"] == ["d", "e", "f"]
    assert first["scale"].item() == 2.0 and second["absent"] is None


def test_rows_of_one_prompt_are_paired_by_length_and_groups_keep_their_place():
    # Generation order: prompt A's rows 0-3, then prompt B's rows 4-7 (shuffled by TRL across two chunks).
    prompts = torch.tensor([[1, 2]] * 4 + [[3, 4]] * 4)
    lengths = torch.tensor([2, 5, 1, 4, 3, 3, 6, 1])
    mask = (torch.arange(6)[None, :] < lengths[:, None]).long()
    rows = torch.arange(8)
    shuffle = [[6, 1, 3, 4], [0, 7, 2, 5]]
    chunks = [{"rapo_row": rows[i], "prompt_ids": prompts[i], "prompt_mask": torch.ones(4, 2, dtype=torch.long),
               "completion_mask": mask[i]} for i in shuffle]
    out = rows_in_generation_order(chunks)
    order = [row for chunk in out for row in chunk["rapo_row"].tolist()]
    assert order == [1, 3, 0, 2, 6, 4, 5, 7]  # A's rows longest first, then B's: [5, 4, 2, 1] and [6, 3, 3, 1]
    assert [chunk["completion_mask"].sum(1).tolist() for chunk in out] == [[5, 4, 2, 1], [6, 3, 3, 1]]
    # Padding paid over micro-batches of two, against generation order: 2x(5+2+3+6) = 32 positions vs 2x(5+4+3+6) = 36.
    paired = [max(order_lengths) for order_lengths in ([5, 4], [2, 1], [6, 3], [3, 1])]
    in_sampling_order = [max(pair) for pair in ([2, 5], [1, 4], [3, 3], [6, 1])]
    assert sum(paired) < sum(in_sampling_order)


def test_the_trainer_hands_each_micro_batch_one_groups_rows(tiny_model_dir, tmp_path):
    # One group of G = 4 over two micro-batches of 2, both in one optimizer step: TRL shuffles the rows; RAPO puts
    # consecutive rows together again, so each micro-batch runs one prompt forward.
    trainer = rapo_trainer(tiny_model_dir, tmp_path, per_device_train_batch_size=2, gradient_accumulation_steps=2)
    assert trainer._regroups_micro_batches()
    script(trainer)
    trainer.model.train()
    torch.manual_seed(3)  # a shuffle that splits the pairs
    first = trainer._prepare_inputs(batch_inputs())
    chunks = trainer._buffered_inputs
    assert sorted(row for chunk in chunks for row in chunk["rapo_row"].tolist()) == [0, 1, 2, 3]
    lengths = [length for chunk in chunks for length in chunk["completion_mask"].sum(1).tolist()]
    assert lengths == sorted(lengths, reverse=True)  # one group: its rows paired longest first
    assert first is trainer._buffered_inputs[0]
    off = rapo_trainer(tiny_model_dir, tmp_path / "off", per_device_train_batch_size=2, gradient_accumulation_steps=1,
                       steps_per_generation=2)
    assert not off._regroups_micro_batches()  # two optimizer steps per generation: TRL's shuffle stays


def _accumulated_loss(trainer, batch, split):
    """The loss of one generation accumulated over micro-batches of the given rows, as TRL sums it."""
    trainer.current_gradient_accumulation_steps = len(split)
    total = 0.0
    for rows in split:
        index = torch.tensor(rows)
        micro = {k: v[index] if isinstance(v, torch.Tensor) and v.ndim >= 1 and len(v) == 4 else v
                 for k, v in batch.items()}
        total += trainer.compute_loss(trainer.model, micro).item()
    return total


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "dr_grpo", "bnpo"])
def test_regrouping_only_where_the_split_leaves_the_update_unchanged(tiny_model_dir, tmp_path, loss_type):
    # Two micro-batches of one generation: the group-order split and another one TRL's shuffle could draw. RAPO
    # regroups exactly where the two accumulate to the same loss (bnpo normalises each micro-batch by its own tokens).
    trainer = rapo_trainer(tiny_model_dir, tmp_path, per_device_train_batch_size=2, gradient_accumulation_steps=2,
                           loss_type=loss_type)
    batch = _scored(trainer)
    trainer.model.eval()  # no dropout: the two splits differ only in how rows are grouped
    grouped = _accumulated_loss(trainer, batch, [[0, 1], [2, 3]])
    shuffled = _accumulated_loss(trainer, batch, [[0, 2], [1, 3]])
    assert trainer._regroups_micro_batches() == (grouped == pytest.approx(shuffled, abs=1e-7))
    assert trainer._regroups_micro_batches() == (loss_type != "bnpo")


@pytest.mark.parametrize("settings", [dict(top_entropy_quantile=0.5), dict(entropy_coef=0.05),
                                      dict(use_adaptive_entropy=True)], ids=lambda s: next(iter(s)))
def test_no_regrouping_where_tokens_are_selected_or_averaged_per_micro_batch(tiny_model_dir, tmp_path, settings):
    trainer = rapo_trainer(tiny_model_dir, tmp_path, per_device_train_batch_size=2, gradient_accumulation_steps=2,
                           **settings)
    assert not trainer._regroups_micro_batches()


@pytest.fixture(scope="module")
def tiny_moe_dir(tmp_path_factory):
    """A tiny Qwen2-MoE checkpoint (four experts, two per token) with the tiny model's tokenizer."""
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

    from rapo_trl.models import build_tiny_tokenizer

    tok = build_tiny_tokenizer()
    config = Qwen2MoeConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
                            shared_expert_intermediate_size=16, num_experts=4, num_experts_per_tok=2,
                            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
                            eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=None)
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-qwen2-moe")
    Qwen2MoeForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_no_regrouping_where_the_load_balancing_loss_is_per_micro_batch(tiny_moe_dir, tmp_path):
    # An MoE router's load-balancing loss is taken over each micro-batch's tokens, so the split changes the update.
    trainer = rapo_trainer(tiny_moe_dir, tmp_path, per_device_train_batch_size=2, gradient_accumulation_steps=2,
                           router_aux_loss_coef=1.0)
    assert trainer.aux_loss_enabled
    batch = _scored(trainer)
    trainer.model.eval()
    grouped = _accumulated_loss(trainer, batch, [[0, 1], [2, 3]])
    shuffled = _accumulated_loss(trainer, batch, [[0, 2], [1, 3]])
    assert grouped != pytest.approx(shuffled, abs=1e-6)  # measured 4e-5 apart
    assert not trainer._regroups_micro_batches()


BF16_EMULATED = pytest.mark.skipif(
    not cpu_computes_bf16(),
    reason="this CPU emulates bf16: the two forwards round 1e-3 apart (2-core AVX2 EPYC), as far as one attended "
           "padding column moves them (2e-3), so bf16 cannot tell them apart here; the fp32 case checks the logic")


@pytest.mark.parametrize("dtype", [torch.float32, pytest.param(torch.bfloat16, marks=BF16_EMULATED)])
def test_two_prompts_of_different_lengths_score_as_row_by_row(tiny_model_dir, tmp_path, dtype):
    # Two groups in one micro-batch, their prompts left-padded to one width; fp32 and bf16 weights.
    from tests.helpers.trainers import SCRIPTS

    trainer = rapo_trainer(tiny_model_dir, tmp_path, per_device_train_batch_size=8)
    script(trainer, SCRIPTS * 2)
    trainer.model.train()
    short, long = "Compute 1", "Compute the sum of the first three numbers you can think of, then 2"
    inputs = [{"prompt": [{"role": "user", "content": text}]} for text in (short,) * 4 + (long,) * 4]
    batch = trainer._generate_and_score_completions(inputs)
    assert (batch["prompt_mask"][:4] == 0).any() and (batch["prompt_mask"][4:] == 1).all()  # padding in play
    trainer.model.to(dtype).eval()
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    keep = batch["completion_ids"].size(1)
    assert distinct_prompts(ids, mask, ids.size(1) - keep) is not None
    scored = {}
    for share in (True, False):
        with prompt_forward(share), torch.no_grad():
            scored[share] = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, keep)[0]
    valid = batch["completion_mask"].bool()
    # Measured: 5e-7 apart in fp32, 4e-6 in bf16 (a CPU with AVX512-BF16, with and without oneDNN). One column of
    # left padding attended in the shared forward moves them by 6e-4 (fp32) and 2e-3 (bf16).
    tolerance = 5e-6 if dtype == torch.float32 else 1e-4
    assert torch.allclose(scored[True][valid].float(), scored[False][valid].float(), atol=tolerance)
