"""The rollout engine's generation backend and config, from a RAPOConfig and the trainer's model."""

from __future__ import annotations

from contextlib import ExitStack, contextmanager

from trl.models.utils import unwrap_model_for_generation

from rapo_trl.config import RAPOConfig
from rapo_trl.rollout import RolloutConfig, SamplingSettings, TransformersBackend

SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "do_sample")
"""Keys of ``args.generation_kwargs`` that override the rollout backends' sampling settings."""
ENGINE_OWNED_KEYS = ("max_new_tokens", "max_tokens", "max_length", "min_new_tokens", "stop", "stop_strings",
                     "n", "num_return_sequences", "logprobs", "return_dict_in_generate", "output_scores",
                     "output_logits", "include_stop_str_in_output", "skip_special_tokens", "pad_token_id")
"""Generation options the engine sets itself on every turn; a user's value would break the rollout protocol."""


def sampling_settings(args: RAPOConfig) -> SamplingSettings:
    """The config's sampling fields, overridden by ``generation_kwargs`` as in TRL."""
    sampling = SamplingSettings(
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k or 0,
        min_p=args.min_p,
        repetition_penalty=args.repetition_penalty,
        entropy_top_k=args.step_entropy_top_k,
    )
    for key, value in (args.generation_kwargs or {}).items():
        if key in SAMPLING_KEYS:
            setattr(sampling, key, (value or 0) if key == "top_k" else value)
        elif key in ENGINE_OWNED_KEYS:
            raise ValueError(
                f"generation_kwargs[{key!r}] is set by RAPO's multi-turn engine (per-turn budgets, tool stop "
                "strings, one sample per row, log-probs for step entropy); use max_completion_length, "
                "max_turn_tokens or step_entropy_top_k instead."
            )
        else:
            sampling.extra[key] = value
    return sampling


def rollout_config(args: RAPOConfig, **protocol) -> RolloutConfig:
    """The engine's config from ``args``; ``protocol``: ``tool_protocol`` and, for JSON tool calls, the chat template
    (and its arguments) tool results are rendered with."""
    return RolloutConfig(
        **protocol,
        max_completion_length=args.max_completion_length,
        max_turn_tokens=args.max_turn_tokens,
        max_tool_calls=args.max_tool_calls,
        retrieve_prob=args.retrieve_prob,
        step_entropy=args.step_entropy,
        step_entropy_first_tokens=args.step_entropy_first_tokens,
        tool_workers=args.tool_workers,
        json_tool_timeout=args.json_tool_timeout,
        max_result_chars=args.max_tool_result_chars,
        answer_stop=args.answer_stop,
        max_retrieved_tokens=args.max_retrieved_tokens,
        retrieve_at=tuple(args.retrieve_at),
        retrieve_own_question=args.retrieve_own_question,
        retrieved_step_as_own=args.retrieved_step_as_own,
    )


def make_backend(trainer, vllm_llm=None):
    """vLLM (the trainer's colocated engine, or one the user passed) or the trainer's own model."""
    args = trainer.args
    sampling = sampling_settings(args)
    if vllm_llm is not None or trainer.use_vllm:
        from rapo_trl.rollout.backends.vllm import VLLMBackend

        if vllm_llm is not None:
            return VLLMBackend(vllm_llm, trainer._tokenizer, sampling, adapter_source=lambda: peft_model_of(trainer),
                               version=lambda: trainer.state.global_step)
        # RAPOConfig refused other vLLM modes and tensor parallelism before the model loaded.
        return VLLMBackend(trainer.vllm_generation.llm, trainer._tokenizer, sampling)

    @contextmanager
    def unwrapped():
        # As TRL's own generation does: gathered DeepSpeed-3 / FSDP parameters for the whole rollout.
        with ExitStack() as stack:
            model = stack.enter_context(
                unwrap_model_for_generation(
                    trainer.model_wrapped,
                    trainer.accelerator,
                    gather_deepspeed3_params=args.ds3_gather_for_generation,
                    generation_kwargs=trainer.generation_kwargs,
                    gradient_checkpointing_kwargs=args.gradient_checkpointing_kwargs,
                )
            )
            stack.enter_context(trainer._dist.summon_full_params(trainer.model_wrapped, recurse=False))
            yield model

    return TransformersBackend(unwrapped, trainer._tokenizer, sampling, generation_config=trainer.generation_config)


def peft_model_of(trainer):
    """The PEFT model whose adapter a user-supplied vLLM engine should load (None without PEFT)."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    return model if hasattr(model, "peft_config") else None


@contextmanager
def vllm_kv_cache_awake(trainer):
    """Keep a sleeping colocated vLLM engine's KV cache awake for all turns of a rollout."""
    engine = getattr(trainer, "vllm_generation", None) if trainer.use_vllm else None
    if engine is None or not getattr(engine, "enable_sleep_mode", False):
        yield
        return
    engine.llm.wake_up(tags=["kv_cache"])
    try:
        yield
    finally:
        engine.llm.sleep(level=2)
        engine._llm_weights_sleeping = True  # TRL wakes the weights before its next sync when this is set
