"""A RAPOTrainer on the tiny model with one scripted group, and the loss called directly: shared by the trainer,
padding, signal-monitor and model-card tests."""

from __future__ import annotations

import copy

from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from rapo_trl.config import RAPOConfig
from rapo_trl.rollout import HybridRolloutEngine, RolloutConfig, TransformersBackend
from rapo_trl.trainer import RAPOTrainer
from tests.helpers.fakes import EchoTool
from tests.helpers.scripted import ScriptedGenerate, Turn

G = 4
# One group of four rows sharing a prompt; rows 0-1 are hybrid. Different outputs give different rewards.
SCRIPTS = [
    [Turn("<python>1</python>", 8), Turn("<answer>7</answer>", 2), Turn("<|im_end|>")],
    [Turn("<python>2</python>", 6), Turn("<answer>77</answer>", 3), Turn("<|im_end|>")],
    [Turn("<python>3</python>", 4), Turn("<answer>777</answer>", 4), Turn("<|im_end|>")],
    [Turn("<answer>none</answer><|im_end|>", 5)],
]


def sevens(completions, **kwargs):
    return [float(c[0]["content"].count("7")) for c in completions]


def dataset(n=1):
    return Dataset.from_list([{"prompt": [{"role": "user", "content": f"Compute {i}"}]} for i in range(n)])


def common_args(tmp_path, **kwargs):
    base = dict(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", per_device_train_batch_size=G,
        num_generations=G, max_completion_length=96, learning_rate=0.1, seed=0, logging_steps=1,
        save_strategy="no", loss_type="dapo", epsilon=0.2, epsilon_high=0.28, delta=3.0, beta=0.0,
    )
    base.update(kwargs)
    return base


def rapo_trainer(tiny_model_dir, tmp_path, store=None, **kwargs):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    rapo_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k in RAPOConfig.__dataclass_fields__
                   and k not in GRPOConfig.__dataclass_fields__}
    args = RAPOConfig(**common_args(tmp_path, **kwargs), max_turn_tokens=32, **rapo_kwargs)
    return RAPOTrainer(model, sevens, args=args, train_dataset=dataset(), processing_class=tok,
                       trace_store=store, tools=[EchoTool()])


def script(trainer, scripts=SCRIPTS):
    model = trainer.accelerator.unwrap_model(trainer.model)
    model.generate = ScriptedGenerate(trainer.processing_class, [
        ([], copy.deepcopy(turns)) for turns in scripts
    ], model.config.vocab_size)


def batch_inputs(n_rows=G):
    return [dict(row) for row in dataset()] * n_rows


def loss_and_grads(trainer, batch):
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train(); these tests call the loss directly
    trainer.model.zero_grad()
    loss = trainer.compute_loss(trainer.model, batch)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    return loss.detach(), grads


def agentic_grpo_trainer(tiny_model_dir, output_dir, **settings):
    """TRL's own GRPOTrainer whose rollout_func is RAPO's engine without retrieval: the baseline RAPOTrainer must
    equal when retrieval is off."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    grpo = GRPOTrainer(model, sevens, args=GRPOConfig(**common_args(output_dir, **settings)),
                       train_dataset=dataset(), processing_class=tok)
    engine = HybridRolloutEngine(tok, TransformersBackend(model, tok), [EchoTool()], None,
                                 RolloutConfig(max_completion_length=96, max_turn_tokens=32))

    def agentic_rollout(prompts, trainer):
        ids, _, _ = trainer._tokenize_prompts(prompts)
        rows = engine.run(ids)
        return {"prompt_ids": [r.prompt_ids for r in rows], "completion_ids": [r.completion_ids for r in rows],
                "logprobs": None, "env_mask": [r.env_mask for r in rows]}

    grpo.rollout_func = agentic_rollout
    return grpo


def assert_same_update(rapo_batch: dict, grpo_batch: dict, rapo_loss, grpo_loss, rapo_grads: dict, grpo_grads: dict):
    """RAPOTrainer's step equals GRPOTrainer's: the same (non-zero) advantages, loss and gradient of every parameter."""
    import torch

    assert torch.allclose(rapo_batch["advantages"], grpo_batch["advantages"])
    assert rapo_batch["advantages"].abs().sum() > 0
    assert torch.allclose(rapo_loss, grpo_loss, atol=1e-7) and rapo_loss != 0
    assert rapo_grads.keys() == grpo_grads.keys() and rapo_grads
    for name in rapo_grads:
        assert torch.allclose(rapo_grads[name], grpo_grads[name], atol=1e-7), name
