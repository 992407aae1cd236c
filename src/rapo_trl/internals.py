"""Every private TRL and transformers piece rapo_trl relies on, in one place, checked against what is installed.

RAPOTrainer plugs into GRPOTrainer's hooks and reads some of its attributes; the KV-cache decode loop reuses two of
transformers' generation helpers. None of these is public API, so an upgrade can move them. ``check_internals``
names each one that is gone or changed (tests/test_internals.py runs it), instead of RAPO failing deep inside a run
or, worse, quietly training as plain GRPO.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from dataclasses import dataclass


@dataclass(frozen=True)
class Internal:
    """One private piece: where it lives, what rapo_trl needs of it, and who uses it."""

    owner: str
    """``module:Class`` that holds it."""
    name: str
    """The method or attribute."""
    used_by: str
    """Where in rapo_trl, and why."""
    parameters: tuple[str, ...] = ()
    """For a method: parameter names rapo_trl passes or receives (checked present)."""
    one_of: tuple[str, ...] = ()
    """For a method: names of one argument that has been renamed across versions; at least one must be present."""
    attribute: bool = False
    """An instance attribute: checked by ``self.<name> =`` appearing in the owner's class body."""
    calls_in_order: tuple[str, ...] = ()
    """Source fragments that must appear in the method's body in this order (the order a hook relies on)."""


GRPO = "trl.trainer.grpo_trainer:GRPOTrainer"
TRAINER = "transformers.trainer:Trainer"
VLLM_GENERATION = "trl.generation.vllm_generation:VLLMGeneration"
GENERATION = "transformers.generation.utils:GenerationMixin"
DYNAMIC_LAYER = "transformers.cache_utils:DynamicLayer"
# The decoders the project runs (SmolLM2 is a Llama; the tests' tiny model and the GPU recipes' Qwen2.5 are Qwen2).
DECODERS = ("transformers.models.llama.modeling_llama:LlamaForCausalLM",
            "transformers.models.qwen2.modeling_qwen2:Qwen2ForCausalLM")
CACHE_ARGUMENTS = ("cache", "past_key_values")
"""The names a decoder's ``forward`` has taken its KV cache under, newest first: ``cache`` from transformers 5.24
(``past_key_values`` deprecated there), ``past_key_values`` before. The KV-cache decode loop passes the cache under the
one the installed model's ``forward`` declares."""
FORWARD_ARGUMENTS = ("attention_mask", "position_ids", "logits_to_keep")
"""The other arguments the decode loop passes to ``forward`` by name (a PEFT wrapper hands them on)."""

INTERNALS: tuple[Internal, ...] = (
    # Hooks RAPOTrainer overrides (rapo_trl/trainer/trainer.py).
    Internal(GRPO, "_generate", "calls rollout_func (the hybrid rollout) and turns its env_mask into the tool mask",
             ("prompts",), calls_in_order=("self.rollout_func(prompts, self)", '"env_mask"')),
    Internal(GRPO, "_generate_and_score_completions", "override: the retrieval reward reweights the advantages",
             ("inputs",), calls_in_order=("self._generate(", "self._calculate_rewards(")),
    Internal(GRPO, "_calculate_rewards", "override: rewards see the policy's text without retrieved spans",
             ("inputs", "prompts", "completions", "completion_ids_list")),
    Internal(GRPO, "_compute_loss", "override: the loss forward writes old log-probs lowered by log(1 + m F_ret) "
             "between the forward and TRL's read of them (loss_forward.py)", ("model", "inputs"),
             calls_in_order=("self._get_per_token_logps_and_entropies(", 'inputs.get("old_per_token_logps")')),
    Internal(GRPO, "_compute_loss", "extra loss terms are normalized as TRL's DAPO loss is (loss_terms.py)",
             ("model", "inputs"), calls_in_order=('inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes',
                                                  "self.current_gradient_accumulation_steps / self.args.steps_per_generation")),
    Internal(TRAINER, "current_gradient_accumulation_steps", "the extra loss terms' accumulation window",
             attribute=True),
    Internal(GRPO, "_get_per_token_logps_and_entropies", "override: hands the forward's log-probs to the loss "
             "forward (shaped ratio, extra terms); scores as it does (labels, fused "
             "head) with each prompt run once",
             ("model", "input_ids", "attention_mask", "logits_to_keep", "batch_size", "compute_entropy",
              "compute_aux_loss"),
             calls_in_order=("labels[:, :-logits_to_keep] = -100", "fused_lm_head=True",
                             "outputs.log_probs[:, -logits_to_keep:]")),
    Internal(GRPO, "_prepare_inputs", "override: the micro-batches of a generation are "
             "re-split in generation order after TRL's shuffle (one optimizer step over them all)",
             ("generation_batch",), calls_in_order=("shuffle_sequence_dict(", "split_tensor_dict(",
                                                    "self._buffered_inputs[self._step % self.args.steps_per_generation]")),
    Internal(GRPO, "_buffered_inputs", "the micro-batches of the current generation, re-split in order; saved "
             "with a checkpoint inside a generation cycle and handed back on resume (resilience/generation_buffer.py)",
             attribute=True),
    Internal(GRPO, "_step", "which micro-batch of the generation _prepare_inputs hands out; saved with every "
             "checkpoint and handed back on resume; tells dynamic sampling's draw a step's generations apart",
             attribute=True),
    Internal(GRPO, "training_step", "_step counts micro-steps, the place in the generation cycle a checkpoint saves",
             ("model", "inputs", "num_items_in_batch"), calls_in_order=("super().training_step(", "self._step += 1")),
    Internal(GRPO, "_tokenize_prompts", "the hybrid rollout tokenizes prompts as TRL does", ("prompts",)),
    Internal(GRPO, "_generate", "override: with JSON tools RAPO hides self.tools while TRL takes the rollout's rows, "
             "since TRL runs its own tool loop (and drops env_mask) only when they are set", ("prompts",),
             calls_in_order=("self.rollout_func(prompts, self)", "if self.tools:", "self._tool_call_loop(",
                             'extra_fields.pop("env_mask", None)')),
    Internal(GRPO, "_standalone_tools", "JSON tools every row may call (trainer.py)", attribute=True),
    Internal(GRPO, "_sync_tool_dicts", "each row's JSON tools by name, its environment's methods included, as TRL "
             "sets them up per step", attribute=True),
    Internal(GRPO, "_async_tool_dicts", "each row's async JSON tools by name", attribute=True),
    Internal(GRPO, "environment_factories", "whether rows have environments of their own", attribute=True),
    Internal(GRPO, "environments", "the step's environment of each row, whose calls may run past their timeout",
             attribute=True),
    Internal(GRPO, "_batch_environments", "each row's environment name in the step", attribute=True),
    Internal(GRPO, "_environment_pool", "the instances TRL resets for later steps: one a late call may still change "
             "is replaced by a fresh one (trainer/environments.py)", attribute=True),
    Internal(GRPO, "chat_template", "the template JSON tool results are rendered with", attribute=True),
    Internal(GRPO, "chat_template_kwargs", "apply_chat_template's extra arguments for tool results", attribute=True),
    Internal(GRPO, "_log_completion_extra", "the completions table's per-row rapo_* columns (log_completions)",
             ("column", "values")),
    Internal(GRPO, "_generate_and_score_completions", "dynamic sampling writes replacement rows into the step's "
             "inputs and prompts: TRL must score and log those same lists after the rollout", ("inputs",),
             calls_in_order=("self._generate(prompts)", "self._calculate_rewards(inputs, prompts,",
                             "gather_object(prompts)")),
    Internal(TRAINER, "_save_checkpoint", "override: a failed save leaves no half-written checkpoint folder",
             ("model", "trial"), calls_in_order=("self.save_model(output_dir", "self._save_rng_state(output_dir)",
                                                  "self.state.save_to_json(")),
    Internal(TRAINER, "_get_output_dir", "the run folder a checkpoint is saved under", ("trial",)),
    Internal(TRAINER, "_save_rng_state", "override: RAPO's rollout state is saved beside TRL's RNG state",
             ("output_dir",)),
    Internal(TRAINER, "_load_optimizer_and_scheduler", "override: RAPO's rollout state is restored on resume",
             ("checkpoint",)),
    Internal(TRAINER, "_save", "override: RAPO's model card replaces PEFT's empty one (trainer/model_card_writing.py)",
             ("output_dir", "state_dict")),
    Internal(GRPO, "_get_train_sampler", "override: a resumed run walks each epoch in the uninterrupted run's order "
             "(trainer/resilience/epoch_order.py)", ("dataset",), calls_in_order=("RepeatSampler(", "seed=self.args.seed")),
    Internal("trl.trainer.utils:RepeatSampler", "__iter__", "one permutation drawn per epoch, replayed by "
             "ResumableRepeatSampler.set_epoch", calls_in_order=("torch.randperm(self.num_samples, "
                                                                 "generator=self.generator)",)),
    # Attributes GRPOTrainer sets and RAPOTrainer reads.
    Internal(GRPO, "_metrics", "RAPO's rapo/* and tools/* metrics are logged through it", attribute=True),
    Internal(GRPO, "_tokenizer", "the rollout engine's tokenizer", attribute=True),
    Internal(GRPO, "_dist", "parameters gathered for generation under FSDP (trainer/backend.py)", attribute=True),
    Internal(GRPO, "reward_weights", "weighted rewards for the signal monitor and store growth", attribute=True),
    Internal(GRPO, "_pending_extra_logs", "dynamic sampling keeps candidates' log_extra values out of the "
             "completions table", attribute=True),
    Internal(GRPO, "_pending_metrics", "dynamic sampling keeps candidates' log_metric values out of the metrics",
             attribute=True),
    Internal(GRPO, "generation_config", "sampling config of the transformers backend", attribute=True),
    Internal(GRPO, "generation_kwargs", "unwrap_model_for_generation's kwargs", attribute=True),
    Internal(GRPO, "vllm_generation", "the colocated vLLM engine the backend generates with", attribute=True),
    Internal(VLLM_GENERATION, "_llm_weights_sleeping", "set after a rollout puts vLLM back to sleep, so TRL wakes "
             "the weights before its next sync", attribute=True),
    # transformers' generation helpers reused by the KV-cache decode loop (rollout/backends/kv_decode.py).
    Internal(GENERATION, "_prepare_generation_config", "the decode loop's config is generate's: unset options "
             "from the model's generation_config", ("generation_config",)),
    Internal(GENERATION, "_get_logits_processor", "the decode loop samples with generate's own processors",
             ("generation_config", "input_ids_seq_length", "encoder_input_ids", "prefix_allowed_tokens_fn",
              "logits_processor", "device", "model_kwargs")),
    Internal(GENERATION, "_prepare_special_tokens", "special tokens as generate prepares them",
             ("generation_config", "kwargs_has_attention_mask", "device", "batch_size")),
    Internal(DYNAMIC_LAYER, "update", "the preallocated cache layer replaces the growing one",
             ("key_states", "value_states")),
    Internal(DYNAMIC_LAYER, "batch_select_indices", "finished rows leave the preallocated cache", ("indices",)),
    Internal(DYNAMIC_LAYER, "crop", "kept consistent with the preallocated buffer", ("tokens_to_remove",)),
    # The decoder forward arguments the KV-cache decode loop passes by name; the cache's name changed in 5.24.
    *(Internal(decoder, "forward", "the KV-cache decode loop passes the cache and these arguments by name",
               FORWARD_ARGUMENTS, one_of=CACHE_ARGUMENTS) for decoder in DECODERS),
)


def _resolve(owner: str):
    module, _, name = owner.partition(":")
    return getattr(importlib.import_module(module), name)


@functools.cache
def _source(function) -> str:
    # Reading a class's source parses its whole module; several internals read the same class or module.
    try:
        return inspect.getsource(function)
    except (OSError, TypeError):
        return ""


def problem_with(internal: Internal) -> str | None:
    """What is wrong with ``internal`` in the installed libraries, or None."""
    where = f"{internal.owner.replace(':', '.')}.{internal.name} (used by rapo_trl for: {internal.used_by})"
    try:
        owner = _resolve(internal.owner)
    except (ImportError, AttributeError) as error:
        return f"{where}: cannot import its owner ({type(error).__name__}: {error})"
    if internal.attribute:
        if f"self.{internal.name} =" not in _source(owner):
            return f"{where}: no longer assigned in {owner.__name__}"
        return None
    member = inspect.getattr_static(owner, internal.name, None)
    if member is None:
        return f"{where}: missing"
    if internal.parameters:
        parameters = inspect.signature(member).parameters
        missing = [p for p in internal.parameters if p not in parameters]
        if missing:
            return f"{where}: its signature lost {missing} (now {list(parameters)})"
    if internal.one_of:
        parameters = inspect.signature(member).parameters
        if not any(name in parameters for name in internal.one_of):
            return (f"{where}: its signature has none of {list(internal.one_of)}, a renamed argument "
                    f"(now {list(parameters)})")
    body = _source(member)
    position = 0
    for fragment in internal.calls_in_order:
        found = body.find(fragment, position)
        if found < 0:
            return f"{where}: its body no longer has {fragment!r} after the fragments before it {internal.calls_in_order}"
        position = found + len(fragment)
    return None


def check_internals(internals=INTERNALS) -> list[str]:
    """One line per private piece that is missing or changed in the installed TRL / transformers."""
    return [problem for problem in map(problem_with, internals) if problem is not None]
