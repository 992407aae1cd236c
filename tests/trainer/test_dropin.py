"""RAPOTrainer as a drop-in for GRPOTrainer (TRL 1.16): constructor, rollout dict, sampling settings, and
loss/gradient parity with retrieval off for each loss aggregation, with and without KL, and num_iterations 2."""

from __future__ import annotations

import inspect

import pytest
import torch
from transformers import AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from rapo_trl.config import RAPOConfig
from rapo_trl.trainer import RAPOTrainer
from tests.helpers.fakes import FixedStore
from tests.helpers.trainers import (
    agentic_grpo_trainer,
    assert_same_update,
    batch_inputs,
    common_args,
    dataset,
    loss_and_grads,
    rapo_trainer,
    script,
    sevens,
)


def test_constructor_accepts_every_grpo_trainer_argument_in_order():
    grpo = list(inspect.signature(GRPOTrainer.__init__).parameters.values())
    rapo = list(inspect.signature(RAPOTrainer.__init__).parameters.values())
    assert [p.name for p in rapo[: len(grpo)]] == [p.name for p in grpo]
    assert [p.default for p in rapo[: len(grpo)]] == [p.default for p in grpo]
    assert [p.name for p in rapo[len(grpo) :]] == ["trace_store", "vllm_llm"]  # RAPO's own come after


def test_custom_rollouts_are_refused_clearly(tiny_model_dir, tmp_path):
    """A rollout_func of the user's would replace the hybrid rollout; an environment_factory runs in it
    (tests/trainer/test_environment.py)."""
    with pytest.raises(ValueError, match=r"RAPOTrainer does not take rollout_func=.*hybrid rollout"):
        RAPOTrainer(str(tiny_model_dir), sevens, args=RAPOConfig(**common_args(tmp_path)), train_dataset=dataset(),
                    rollout_func=lambda *a, **k: None)


@pytest.mark.parametrize(
    "settings, message",
    [({}, r"vllm_importance_sampling_correction \(on by default\) is not applied"),
     ({"use_vllm": True}, "two vLLM engines")],
)
def test_a_user_vllm_engine_is_refused_where_trl_would_correct_or_replace_it(tmp_path, settings, message):
    """TRL corrects only its own engine's samples; the refusal comes before the model loads (there is none here)."""
    args = RAPOConfig(**common_args(tmp_path), **settings)
    with pytest.raises(ValueError, match=message):
        RAPOTrainer(str(tmp_path / "no-model-here"), sevens, args=args, train_dataset=dataset(), vllm_llm=object())


def test_grpo_config_is_refused_with_the_way_out(tiny_model_dir, tmp_path):
    with pytest.raises(TypeError, match="RAPOConfig takes every GRPOConfig field"):
        RAPOTrainer(str(tiny_model_dir), sevens, args=GRPOConfig(**common_args(tmp_path)), train_dataset=dataset())


def test_quantization_config_reaches_the_model_loader(tiny_model_dir, tmp_path, monkeypatch):
    """A model id plus quantization_config (QLoRA) is loaded by GRPOTrainer with that config."""
    import trl.trainer.grpo_trainer as grpo_module

    seen = {}
    load = grpo_module.create_model_from_path

    def recording_load(path, **kwargs):
        seen.update(kwargs)
        kwargs.pop("quantization_config")  # no bitsandbytes on a CPU runner; the tiny model loads as is
        return load(path, **kwargs)

    monkeypatch.setattr(grpo_module, "create_model_from_path", recording_load)
    marker = object()
    RAPOTrainer(str(tiny_model_dir), sevens, args=RAPOConfig(**common_args(tmp_path)), train_dataset=dataset(),
                processing_class=AutoTokenizer.from_pretrained(tiny_model_dir), quantization_config=marker)
    assert seen["quantization_config"] is marker


def test_rapo_bookkeeping_stays_out_of_rows_and_reward_kwargs(tiny_model_dir, tmp_path):
    keys = set()

    def record(completions, **kwargs):
        keys.update(kwargs)
        return [float(len(c[0]["content"])) for c in completions]

    trainer = rapo_trainer(tiny_model_dir, tmp_path, store=FixedStore(), retrieve_prob=1.0, num_hybrid_generations=2)
    trainer.reward_funcs = [record]
    script(trainer)
    trainer.model.train()
    inputs = batch_inputs()
    trainer._generate_and_score_completions(inputs)
    assert any(r.retrievals for r in trainer.last_rollout.rows)  # there was bookkeeping to leak
    assert keys and not any(k.startswith("rapo") for k in keys), keys
    assert all(set(row) == {"prompt"} for row in inputs)  # TRL writes extra rollout keys into the rows


def rollout_generation_configs(trainer) -> list:
    """The GenerationConfig of every `generate` call one scripted hybrid rollout makes."""
    script(trainer)
    generate = trainer.accelerator.unwrap_model(trainer.model).generate
    configs = []

    def recording(*args, generation_config=None, **kwargs):
        configs.append(generation_config)
        return generate(*args, generation_config=generation_config, **kwargs)

    trainer.accelerator.unwrap_model(trainer.model).generate = recording
    trainer.model.train()
    trainer._hybrid_rollout([row["prompt"] for row in batch_inputs()])
    return configs


def test_generation_kwargs_win_over_sampling_fields(tiny_model_dir, tmp_path):
    trainer = rapo_trainer(tiny_model_dir, tmp_path, temperature=0.9, top_p=1.0,
                           generation_kwargs={"temperature": 0.5, "top_k": 7, "top_p": 0.8})
    sampling = trainer.rollout_engine.backend.sampling
    assert (sampling.temperature, sampling.top_k, sampling.top_p) == (0.5, 7, 0.8)
    configs = rollout_generation_configs(trainer)
    assert configs and all((c.temperature, c.top_k, c.top_p) == (0.5, 7, 0.8) for c in configs)


def test_other_generation_kwargs_reach_the_generation_config(tiny_model_dir, tmp_path):
    # As in TRL, generation_kwargs beyond the sampling fields go to generate's config as they are.
    trainer = rapo_trainer(tiny_model_dir, tmp_path, generation_kwargs={"no_repeat_ngram_size": 3})
    assert trainer.rollout_engine.backend.sampling.extra == {"no_repeat_ngram_size": 3}
    configs = rollout_generation_configs(trainer)
    assert configs and all(c.no_repeat_ngram_size == 3 for c in configs)


@pytest.mark.parametrize("key", ["max_new_tokens", "stop_strings", "n"])
def test_generation_kwargs_the_engine_owns_are_refused(tiny_model_dir, tmp_path, key):
    with pytest.raises(ValueError, match=key):
        rapo_trainer(tiny_model_dir, tmp_path, generation_kwargs={key: 4})


def test_vllm_sampling_params_take_the_extra_generation_kwargs(monkeypatch):
    import sys
    import types

    from rapo_trl.rollout import SamplingSettings
    from rapo_trl.rollout.backends.vllm import VLLMBackend

    fake = types.ModuleType("vllm")
    fake.SamplingParams = lambda **kwargs: kwargs  # records what the backend asks vLLM for
    monkeypatch.setitem(sys.modules, "vllm", fake)
    backend = VLLMBackend.__new__(VLLMBackend)
    backend.sampling = SamplingSettings(temperature=0.7, extra={"presence_penalty": 0.5, "seed": 3})
    params = backend._params(16, ["</python>"])
    assert params["presence_penalty"] == 0.5 and params["seed"] == 3
    assert params["temperature"] == 0.7 and params["max_tokens"] == 16


# ---------------------------------------------------------------------------------------------- parity

def _perturb(model, seed=0, scale=0.05):
    """The same small deterministic change to every weight: stands in for an earlier update, so the ratio
    pi / pi_old differs from 1 when old log-probs were stored (num_iterations 2)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, param in sorted(model.named_parameters()):
            param.add_(scale * torch.randn(param.shape, generator=generator))


def _batch_loss_grads(trainer, perturb):
    script(trainer)
    trainer.model.train()
    batch = trainer._generate_and_score_completions(batch_inputs())
    if perturb:
        _perturb(trainer.model)
    loss, grads = loss_and_grads(trainer, batch)
    return batch, loss, grads


@pytest.mark.parametrize(
    "loss_type,beta,num_iterations",
    [("grpo", 0.0, 1), ("dapo", 0.0, 1), ("dr_grpo", 0.0, 1), ("bnpo", 0.0, 1),
     ("grpo", 0.04, 1), ("dapo", 0.04, 1), ("dr_grpo", 0.04, 1), ("bnpo", 0.04, 1),
     ("dapo", 0.0, 2), ("grpo", 0.04, 2)],
)
def test_retrieval_off_matches_grpo_trainer(tiny_model_dir, tmp_path, loss_type, beta, num_iterations):
    """Same rollouts, same batch: the same advantages, loss and gradients as GRPOTrainer."""
    settings = dict(loss_type=loss_type, beta=beta, num_iterations=num_iterations)
    rapo = rapo_trainer(tiny_model_dir, tmp_path / "rapo", store=None, **settings)
    rapo_batch, rapo_loss, rapo_grads = _batch_loss_grads(rapo, perturb=num_iterations > 1)

    grpo = agentic_grpo_trainer(tiny_model_dir, tmp_path / "grpo", **settings)
    grpo_batch, grpo_loss, grpo_grads = _batch_loss_grads(grpo, perturb=num_iterations > 1)

    assert rapo_batch.keys() == grpo_batch.keys() | {"rapo_retrieved_fraction", "rapo_row"}
    assert ("old_per_token_logps" in rapo_batch) == (num_iterations > 1)
    assert ("ref_per_token_logps" in rapo_batch) == (beta > 0)
    assert torch.equal(rapo_batch["completion_ids"], grpo_batch["completion_ids"])
    assert_same_update(rapo_batch, grpo_batch, rapo_loss, grpo_loss, rapo_grads, grpo_grads)
    if num_iterations > 1:  # the perturbation really moved the ratio away from 1
        assert not torch.allclose(rapo_batch["old_per_token_logps"], _current_logps(rapo, rapo_batch), atol=1e-4)


def _current_logps(trainer, batch):
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attn = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, attn, batch["completion_ids"].size(1))
    return logps
