"""How ``rapo train`` builds a trainer: the recipe's questions, rewards and tools (`TrainingData`), the model they
train (`PolicySource`) and the start it trains from. The RAPO run and its GRPO baseline are built the same way, in
this process or in a second one, which loads both from the recipe again (`rapo_trl.cli.grpo_alongside`)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from rapo_trl.cli.common import build_tools, eval_splits, model_init_kwargs, resolve_model_path, training_rows
from rapo_trl.cli.environment import environment_factory, environment_rewards, environment_rows
from rapo_trl.cli.rewards import reward_names, training_rewards, with_reward_columns


@dataclass
class TrainingData:
    """The recipe's training questions (and held-out ones when evaluating during training), rewards and tools."""

    rows: Any
    eval_rows: Any
    reward_funcs: list
    reward_weights: list[float] | None
    tools: list
    environment: Any
    """The TRL environment class, or None."""


@dataclass
class PolicySource:
    """The model a run trains and how it loads: its folder, tokenizer, init kwargs and LoRA config."""

    model_args: Any
    path: str
    tokenizer: Any
    init_kwargs: dict | None
    peft_config: Any
    """TRL's LoRA config from the recipe, or None when every weight trains."""


def load_training_data(script, rapo_args) -> TrainingData:
    """The questions, rewards and tools of ``script``; the held-out questions only when ``rapo_args`` evaluates
    during training (TRL's eval_dataset, the questions rapo eval asks, never trained on)."""
    environment = environment_factory(script) if script.environment_factory else None
    if environment is None:
        reward_funcs, reward_weights = training_rewards(script, rapo_args.reward_weights)
    else:
        reward_funcs, reward_weights = environment_rewards(script, rapo_args.reward_weights)
    tools = build_tools(script) if script.tools is not None or environment is None else []
    rewards_by_name = dict(zip(reward_names(script), reward_funcs))
    rows = training_rows(script, "train", tools) if environment is None else environment_rows(script, "train")
    rows = with_reward_columns(rows, rewards_by_name)
    eval_rows = None
    if str(getattr(rapo_args.eval_strategy, "value", rapo_args.eval_strategy)) != "no":
        held_out = eval_splits(script)[0]
        eval_rows = (training_rows(script, held_out, tools) if environment is None
                     else environment_rows(script, held_out))
        eval_rows = with_reward_columns(eval_rows, rewards_by_name)
    return TrainingData(rows, eval_rows, reward_funcs, reward_weights, tools, environment)


def load_policy_source(rapo_args, model_args) -> PolicySource:
    """The model and tokenizer folder (SmolLM2 is converted from its GGUF on first use, a minute) and how it loads."""
    from transformers import AutoTokenizer
    from trl import get_peft_config

    from rapo_trl.rollout.agent import tokenizer_kwargs

    path = resolve_model_path(model_args.model_name_or_path, model_args.model_revision)
    init_kwargs = model_init_kwargs(model_args, rapo_args)
    tokenizer = AutoTokenizer.from_pretrained(path, **tokenizer_kwargs(init_kwargs))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return PolicySource(model_args, path, tokenizer, init_kwargs, get_peft_config(model_args))


def build_trainer(data: TrainingData, source: PolicySource, start: str | None, args, trace_store):
    """A RAPOTrainer of a freshly loaded policy: the ``start`` adapter or model (the warm start, or SFT on the
    store), else the model itself, so every arm of a run starts from the same one."""
    from trl import get_quantization_config

    from rapo_trl.trainer import RAPOTrainer

    policy, peft = source.path, source.peft_config
    if start is not None:
        policy, peft = warm_policy(source.path, start, source.peft_config, args, source.model_args,
                                   source.init_kwargs)
    loads_by_path = isinstance(policy, str)
    # The push is done once, from a folder made for it (`rapo_trl.cli.push`): TRL's would upload output_dir as it
    # is, at every save, the warm start included. A loaded policy takes no init kwargs (TRL warns).
    return RAPOTrainer(
        policy,
        data.reward_funcs,
        args=with_values(args, reward_weights=data.reward_weights, push_to_hub=False,
                         model_init_kwargs=source.init_kwargs if loads_by_path else None),
        train_dataset=data.rows,
        eval_dataset=data.eval_rows,
        processing_class=source.tokenizer,
        quantization_config=get_quantization_config(source.model_args) if loads_by_path else None,
        peft_config=peft,
        trace_store=trace_store,
        tools=data.tools,
        environment_factory=data.environment,
    )


def with_values(rapo_args, **values):
    """A copy of ``rapo_args`` with ``values`` set: the trainer's config, while the recipe's stays as parsed. A copy,
    not ``dataclasses.replace``, which would run TRL's checks again on values they already derived."""
    unknown = [name for name in values if not hasattr(rapo_args, name)]
    if unknown:
        raise AttributeError(f"{type(rapo_args).__name__} has no field {unknown}.")
    args = copy.copy(rapo_args)
    for name, value in values.items():
        setattr(args, name, value)
    return args


def warm_policy(model_path: str, warm: str, peft_config, rapo_args, model_args, init_kwargs: dict | None = None):
    """What RAPO trains after a warm start, and the peft_config it is handed: with LoRA, the base loaded as the run
    would load it (its half type, its quantization, ``init_kwargs``, by default the recipe's ``model_init_kwargs``)
    with the warm start's adapter on it, trainable; otherwise the merged warm start by path."""
    if peft_config is None:
        return warm, None
    from trl import get_quantization_config

    from rapo_trl.cli.warm_start import load_adapter_for_training
    from rapo_trl.hardware import half_frozen_init_kwargs

    quantization = get_quantization_config(model_args)
    init_kwargs = rapo_args.model_init_kwargs if init_kwargs is None else init_kwargs
    init_kwargs = half_frozen_init_kwargs(model_path, init_kwargs, rapo_args, peft_config, quantization)
    kwargs = {**(init_kwargs or {}), **({"quantization_config": quantization} if quantization is not None else {})}
    policy = load_adapter_for_training(model_path, warm, kwargs, getattr(peft_config, "lora_dropout", None))
    return policy, None
