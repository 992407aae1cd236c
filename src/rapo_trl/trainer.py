"""RAPOTrainer: GRPOTrainer with step-wise hybrid rollouts and RAPO's objective (docs/design.md).

Only the three places of docs/trl-integration.md are touched:
1. ``rollout_func``: the hybrid rollout engine produces ids, env_mask and RAPO's per-row fields;
2. ``_generate_and_score_completions``: advantages reweighted by the retrieval reward, and the
   per-row ratio shift log(1 + m F_ret) stored beside them;
3. ``_compute_loss``: old log-probs lowered by that shift, so TRL's clip acts on (1 + m F_ret) r.
Reward functions see completions rebuilt from token ids with retrieved spans removed (``_calculate_rewards``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import textwrap
from contextlib import ExitStack, contextmanager, suppress

import torch
from trl import GRPOTrainer
from trl.models.utils import unwrap_model_for_generation
from trl.trainer.utils import get_config_model_id

from rapo_trl.config import RAPOConfig
from rapo_trl.objective import (
    group_normalize,
    ratio_log_shift,
    reweight_advantages,
    trajectory_retrieval_reward,
)
from rapo_trl.padding import trim_padding_columns
from rapo_trl.rollout import (
    HybridRolloutEngine,
    RolloutConfig,
    RolloutRow,
    SamplingSettings,
    TransformersBackend,
)
from rapo_trl.rollout.engine import is_hybrid_row
from rapo_trl.signal_monitor import SignalMonitor
from rapo_trl.store.steps import prompt_text
from rapo_trl.tools.registry import tools_by_tag

logger = logging.getLogger(__name__)

RAPO_STATE_FILE = "rapo_state_{process}.json"
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "do_sample")
"""Keys of ``args.generation_kwargs`` that override the rollout backends' sampling settings."""
ENGINE_OWNED_KEYS = ("max_new_tokens", "max_tokens", "max_length", "min_new_tokens", "stop", "stop_strings",
                     "n", "num_return_sequences", "logprobs", "return_dict_in_generate", "output_scores",
                     "output_logits", "include_stop_str_in_output", "skip_special_tokens", "pad_token_id")
"""Generation options the engine sets itself on every turn; a user's value would break the rollout protocol."""


def _query_prefix(prompt) -> str:
    """A prompt's retrieval context: its non-system text, as the store builds keys (docs/design.md)."""
    return prompt_text(prompt) + "\n"


class RAPOTrainer(GRPOTrainer):
    """Trainer for Retrieval-Augmented Policy Optimization (RAPO).

    A [`~trl.GRPOTrainer`] whose rollouts are step-wise and tool-using: the policy writes `<python>` /
    `<search>` calls, their results are appended as forced tokens, and in hybrid rollouts a step trace
    retrieved from `trace_store` may follow each tool step. The loss adds RAPO's retrieval reward
    (advantage reweighting) and retrieval-aware importance shaping.

    Args:
        model: model id, local path, or model object (as for GRPOTrainer).
        reward_funcs: reward function(s), e.g. ``rapo_trl.rewards.rapo_outcome_reward``.
        args: a [`RAPOConfig`].
        tools: tag tools (``PythonTool``, ``SearchTool``, or your own ``Tool``) and plain typed functions
            with docstrings, as GRPOTrainer takes them (wrapped as ``FunctionTool``: the policy writes
            ``<name>{"arg": value}</name>``), run by RAPO's hybrid rollouts (not by GRPOTrainer's
            chat-template tool loop).
        rollout_func, environment_factory: accepted for signature parity with GRPOTrainer and refused
            with a clear error: RAPO's hybrid rollout is the rollout function.
        trace_store: a ``TraceStore`` (or anything with ``select(contexts)``); ``None`` trains without
            retrieval, i.e. agentic GRPO.
        vllm_llm: an existing ``vllm.LLM`` to generate with (adapter-only sync for LoRA); with
            ``args.use_vllm`` the trainer's own colocated engine is used instead.
        The other arguments are GRPOTrainer's, with the same names, order and meaning
        (``quantization_config`` included, e.g. for QLoRA); RAPO's own come after them.
    """

    _tag_names = ["trl", "rapo", "rapo_trl"]
    _name = "RAPO"
    _paper = {
        "title": "RAPO: Expanding Exploration for LLM Agents via Retrieval-Augmented Policy Optimization",
        "id": "2603.03078",
        # docstyle-ignore
        "citation": textwrap.dedent("""\
            @misc{zhang2026rapo,
                title         = {{RAPO: Expanding Exploration for LLM Agents via Retrieval-Augmented Policy Optimization}},
                author        = {Siwei Zhang and Yun Xiong and Xi Chen and Zi'an Jia and Renhong Huang and Jiarong Xu and Jiawei Zhang},
                year          = 2026,
                eprint        = {2603.03078},
                archivePrefix = {arXiv},
                primaryClass  = {cs.AI},
            }"""),
    }

    def __init__(
        self,
        model,
        reward_funcs=None,
        args: RAPOConfig | None = None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        reward_processing_classes=None,
        callbacks=None,
        optimizers=(None, None),
        quantization_config=None,
        peft_config=None,
        tools=None,
        rollout_func=None,
        environment_factory=None,
        trace_store=None,
        vllm_llm=None,
    ):
        for name, value in (("rollout_func", rollout_func), ("environment_factory", environment_factory)):
            if value is not None:
                raise ValueError(
                    f"RAPOTrainer does not take {name}=: its step-wise hybrid rollout (tools, retrieval, per-step "
                    "entropies) is the rollout function. Pass tools=[...] and trace_store= instead, or use "
                    f"GRPOTrainer for a custom {name}."
                )
        # Checked before the model loads: a bad tool fails fast. Plain functions become FunctionTools.
        rapo_tools = list(tools_by_tag(tools).values())
        if args is None:
            model_name = model if isinstance(model, str) else get_config_model_id(model.config)
            args = RAPOConfig(f"{str(model_name).rstrip('/').split('/')[-1]}-RAPO")
        if not isinstance(args, RAPOConfig):
            raise TypeError(
                f"RAPOTrainer needs a RAPOConfig, got {type(args).__name__}. RAPOConfig takes every GRPOConfig "
                "field under the same name (with RAPO's defaults for loss_type, epsilon_high, delta and beta)."
            )
        super().__init__(
            model,
            reward_funcs,
            args=args,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            reward_processing_classes=reward_processing_classes,
            callbacks=callbacks,
            optimizers=optimizers,
            quantization_config=quantization_config,
            peft_config=peft_config,
        )
        self.trace_store = trace_store
        self._configure_store(trace_store)
        self.rapo_tools = rapo_tools
        self.rollout_engine = HybridRolloutEngine(
            self._tokenizer,
            self._make_backend(vllm_llm),
            self.rapo_tools,
            trace_store,
            RolloutConfig(
                max_completion_length=args.max_completion_length,
                max_turn_tokens=args.max_turn_tokens,
                max_tool_calls=args.max_tool_calls,
                num_generations=args.num_generations,
                num_hybrid_generations=args.num_hybrid_generations,
                retrieve_prob=args.retrieve_prob,
                step_entropy=args.step_entropy,
                entropy_first_tokens=args.entropy_first_tokens,
                tool_workers=args.tool_workers,
                answer_stop=args.answer_stop,
                max_retrieved_tokens=args.max_retrieved_tokens,
            ),
            seed=args.seed + self.accelerator.process_index,
        )
        # Set after init: TRL warns about rollout_func passed to the constructor (docs/trl-integration.md).
        self.rollout_func = self._hybrid_rollout
        self._last_rows: list[RolloutRow] = []
        self._last_mode = "train"
        self.base_model_id: str | None = None
        """Hub id of the base model for the model card, when the model was loaded from a local folder."""
        self._signal_monitor = SignalMonitor(patience=args.signal_loss_patience)

    # ------------------------------------------------------------------ setup

    def train(self, *args, **kwargs):
        self._warn_if_nothing_to_retrieve()
        return super().train(*args, **kwargs)

    def _warn_if_nothing_to_retrieve(self) -> None:
        """Once, at the start of training: hybrid rollouts are configured but the store cannot feed them."""
        args = self.args
        if args.retrieve_prob <= 0 or args.num_hybrid_generations == 0 or not self.accelerator.is_main_process:
            return
        if self.trace_store is None:
            logger.warning("RAPO: hybrid rollouts are configured (retrieve_prob=%s) but no trace_store was given: "
                           "nothing is retrieved and training is agentic GRPO. Pass trace_store=TraceStore(...) "
                           "built with build_from_agent / add_from_dataset, or set retrieve_prob=0.", args.retrieve_prob)
        elif hasattr(self.trace_store, "__len__") and len(self.trace_store) == 0:
            logger.warning("RAPO: the trace store %r is empty: every retrieval will insert the fallback text, not "
                           "a retrieved step. Fill it first (TraceStore.build_from_agent, add_from_dataset or "
                           "`rapo build-store`).", self.trace_store)

    def create_model_card(self, model_name=None, dataset_name=None, tags=None, **kwargs):
        """TRL's card for this trainer (paper, tags, citation) plus RAPO's recipe and any `rapo eval` table,
        written to ``output_dir/README.md``; see `rapo_trl.model_card`."""
        if not self.is_world_process_zero():
            return
        from rapo_trl.model_card import build_model_card

        card = build_model_card(self, model_name=model_name, dataset_name=dataset_name, tags=tags,
                                base_model=kwargs.get("base_model"), evaluation=kwargs.get("evaluation"))
        output_dir = kwargs.get("output_dir") or self.args.output_dir
        os.makedirs(output_dir, exist_ok=True)
        card.save(os.path.join(output_dir, "README.md"))

    def _save(self, output_dir=None, state_dict=None):
        super()._save(output_dir, state_dict)
        # PEFT's save_pretrained leaves its empty card template (with a local base path): put RAPO's card in
        # its place. Checkpoints are left as they are (TRL writes the card to output_dir when it saves one).
        folder = output_dir or self.args.output_dir
        if self.is_world_process_zero() and not os.path.basename(os.path.normpath(folder)).startswith("checkpoint-"):
            self.create_model_card(output_dir=folder)

    def _configure_store(self, store) -> None:
        if (self.args.grow_store and self.accelerator.num_processes > 1 and store is not None
                and getattr(store, "path", None) is not None):
            raise ValueError(
                "grow_store with several processes needs a store they can all write: an embedded store is "
                "single-writer. Serve it with `chroma run --path DIR` and pass TraceStore.connect(host, port)."
            )
        config = getattr(store, "config", None)
        if config is None:
            return
        for ours, theirs in (("retrieval_top_k", "top_k"), ("min_trace_reward", "min_reward"),
                             ("fallback_text", "fallback_text")):
            value = getattr(self.args, ours)
            if value is not None and hasattr(config, theirs):
                setattr(config, theirs, value)

    def _make_backend(self, vllm_llm):
        args = self.args
        sampling = SamplingSettings(
            temperature=args.temperature,
            top_p=args.top_p,
            top_k=args.top_k or 0,
            min_p=args.min_p,
            repetition_penalty=args.repetition_penalty,
            entropy_top_k=args.entropy_top_k,
        )
        # As in TRL, generation_kwargs win over the sampling fields of the config.
        for key, value in (args.generation_kwargs or {}).items():
            if key in SAMPLING_KEYS:
                setattr(sampling, key, (value or 0) if key == "top_k" else value)
            elif key in ENGINE_OWNED_KEYS:
                raise ValueError(
                    f"generation_kwargs[{key!r}] is set by RAPO's multi-turn engine (per-turn budgets, tool stop "
                    "strings, one sample per row, log-probs for step entropy); use max_completion_length, "
                    "max_turn_tokens or entropy_top_k instead."
                )
            else:
                sampling.extra[key] = value
        if vllm_llm is not None or self.use_vllm:
            from rapo_trl.rollout.backends.vllm import VLLMBackend

            if vllm_llm is None:
                if args.vllm_mode != "colocate":
                    raise ValueError(
                        "RAPOTrainer runs multi-turn rollouts on vLLM in colocate mode only (server mode can "
                        "desynchronise ranks); set vllm_mode='colocate' or pass vllm_llm=."
                    )
                if args.vllm_tensor_parallel_size > 1:
                    raise ValueError(
                        "RAPOTrainer's multi-turn vLLM rollouts need vllm_tensor_parallel_size=1 (each rank "
                        "generates its own rows); use data parallelism across GPUs instead."
                    )
                return VLLMBackend(self.vllm_generation.llm, self._tokenizer, sampling)
            return VLLMBackend(vllm_llm, self._tokenizer, sampling, adapter_source=self._adapter_source,
                               version=lambda: self.state.global_step)

        @contextmanager
        def unwrapped():
            with ExitStack() as stack:
                model = stack.enter_context(
                    unwrap_model_for_generation(
                        self.model_wrapped,
                        self.accelerator,
                        gather_deepspeed3_params=args.ds3_gather_for_generation,
                        generation_kwargs=self.generation_kwargs,
                        gradient_checkpointing_kwargs=args.gradient_checkpointing_kwargs,
                    )
                )
                stack.enter_context(self._dist.summon_full_params(self.model_wrapped, recurse=False))
                yield model

        return TransformersBackend(unwrapped, self._tokenizer, sampling, generation_config=self.generation_config)

    def _adapter_source(self):
        """The PEFT model whose adapter a user-supplied vLLM engine should load (None without PEFT)."""
        model = self.accelerator.unwrap_model(self.model)
        return model if hasattr(model, "peft_config") else None

    # ------------------------------------------------------------------ seam 1: rollout

    def current_retrieve_prob(self) -> float:
        """p at the current step, following ``retrieve_prob_schedule``."""
        args = self.args
        if args.retrieve_prob_schedule == "constant" or not self.state.max_steps:
            return args.retrieve_prob
        progress = min(1.0, self.state.global_step / self.state.max_steps)
        if args.retrieve_prob_schedule == "linear":
            weight = 1.0 - progress
        else:
            weight = 0.5 * (1.0 + math.cos(math.pi * progress))
        return args.retrieve_prob_final + (args.retrieve_prob - args.retrieve_prob_final) * weight

    def _hybrid_rollout(self, prompts: list, trainer=None) -> dict:
        training = self.model.training
        mode = "train" if training else "eval"
        group = self.num_generations if training else self.num_generations_eval
        offset = self.accelerator.process_index * len(prompts)
        hybrid = [
            training and is_hybrid_row(offset + i, group, self.args.num_hybrid_generations)
            for i in range(len(prompts))
        ]
        prompt_ids, _, _ = self._tokenize_prompts(prompts)
        self.rollout_engine.config.retrieve_prob = self.current_retrieve_prob()
        with self._vllm_awake():
            rows = self.rollout_engine.run(
                prompt_ids, [_query_prefix(p) for p in prompts], hybrid, retrieval_enabled=training
            )
        self._last_rows, self._last_mode = rows, mode
        self._log_rollout_metrics(rows, mode)
        use_logprobs = all(row.logprobs is not None for row in rows)
        return {
            "prompt_ids": [row.prompt_ids for row in rows],
            "completion_ids": [row.completion_ids for row in rows],
            "logprobs": [row.logprobs for row in rows] if use_logprobs else None,
            "env_mask": [row.env_mask for row in rows],
        }  # RAPO's per-row state stays in self._last_rows: TRL would copy extra keys into rows and reward kwargs

    @contextmanager
    def _vllm_awake(self):
        """Keep a sleeping colocated vLLM engine's KV cache awake for all turns of a rollout."""
        engine = getattr(self, "vllm_generation", None) if self.use_vllm else None
        if engine is None or not getattr(engine, "enable_sleep_mode", False):
            yield
            return
        engine.llm.wake_up(tags=["kv_cache"])
        try:
            yield
        finally:
            engine.llm.sleep(level=2)
            engine._llm_weights_sleeping = True

    def _gathered_mean(self, values: list[float], weights: list[float] | None = None) -> float:
        device = self.accelerator.device
        values_t = torch.tensor(values or [0.0], dtype=torch.float32, device=device)
        weights_t = torch.tensor(weights if weights is not None else [1.0] * len(values), device=device)
        if not values:
            weights_t = torch.zeros(1, device=device)
        stats = torch.stack([(values_t * weights_t).sum(), weights_t.sum()])
        total, count = self.accelerator.gather(stats.unsqueeze(0)).sum(dim=0).tolist()
        return total / count if count else 0.0

    def _log_rollout_metrics(self, rows: list[RolloutRow], mode: str) -> None:
        metrics = self._metrics[mode]
        events = [e for row in rows for e in row.retrievals]
        hybrid_rows = [row for row in rows if row.is_hybrid]
        stats = self.rollout_engine.last_stats
        metrics["rapo/hybrid_share"].append(self._gathered_mean([float(r.is_hybrid) for r in rows]))
        metrics["rapo/retrieval_rate"].append(self._gathered_mean([float(bool(r.retrievals)) for r in hybrid_rows]))
        metrics["rapo/retrievals_per_hybrid_rollout"].append(
            self._gathered_mean([float(len(r.retrievals)) for r in hybrid_rows])
        )
        metrics["rapo/store_errors"].append(float(self.rollout_engine.store_errors))
        metrics["rapo/skipped_retrievals"].append(
            self._gathered_mean([float(r.skipped_retrievals) for r in hybrid_rows])
        )
        metrics["rapo/fallback_rate"].append(self._gathered_mean([float(e.is_fallback) for e in events]))
        metrics["rapo/retrieved_fraction"].append(self._gathered_mean([r.retrieved_fraction for r in hybrid_rows]))
        metrics["rapo/entropy_before_retrieval"].append(
            self._gathered_mean([e.entropy_pre for e in events if e.entropy_pre is not None])
        )
        metrics["rapo/entropy_after_retrieval"].append(
            self._gathered_mean([e.entropy_post for e in events if e.entropy_post is not None])
        )
        metrics["rapo/retrieve_prob"].append(self.rollout_engine.config.retrieve_prob)
        metrics["rapo/truncated_rate"].append(self._gathered_mean([float(r.truncated) for r in rows]))
        metrics["tools/call_frequency"].append(self._gathered_mean([float(r.tool_calls) for r in rows]))
        metrics["tools/failure_frequency"].append(
            self._gathered_mean([r.tool_failures / r.tool_calls for r in rows if r.tool_calls],
                                [float(r.tool_calls) for r in rows if r.tool_calls])
        )
        for name, seconds in (("generate", stats.generate_seconds), ("tools", stats.tool_seconds),
                              ("retrieval", stats.retrieval_seconds)):
            metrics[f"rapo/time_{name}"].append(seconds)

    # ------------------------------------------------------------------ rewards see the policy's text only

    def _policy_view(self, row: RolloutRow) -> list[int]:
        """Completion ids with retrieved spans removed (by token span, not by pattern)."""
        if self.args.score_retrieved_blocks or not row.retrievals:
            return row.completion_ids
        keep = [True] * len(row.completion_ids)
        for event in row.retrievals:
            keep[event.start : event.end] = [False] * (event.end - event.start)
        return [t for t, k in zip(row.completion_ids, keep) if k]

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rows = self._last_rows
        if len(rows) == len(completion_ids_list):
            completion_ids_list = [self._policy_view(row) for row in rows]
            texts = self.processing_class.batch_decode(completion_ids_list, skip_special_tokens=True)
            if completions and isinstance(completions[0], list):
                completions = [[{"role": "assistant", "content": text}] for text in texts]
            else:
                completions = texts
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._last_rewards_per_func = rewards_per_func
        self._last_policy_texts = completions
        return rewards_per_func

    # ------------------------------------------------------------------ seam 2: advantages

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        rows = self._last_rows
        if self._last_mode != "train" or len(rows) != len(out["advantages"]):
            return out
        device = self.accelerator.device
        z = torch.tensor(
            [trajectory_retrieval_reward((e.entropy_pre, e.entropy_post) for e in row.retrievals) for row in rows],
            dtype=torch.float32,
            device=device,
        )
        all_z = self.accelerator.gather(z)
        a_ret_all = group_normalize(all_z, self.num_generations, eps=self.args.retrieval_advantage_epsilon)
        start = self.accelerator.process_index * len(rows)
        a_ret = a_ret_all[start : start + len(rows)].to(out["advantages"].dtype)
        out["advantages"] = reweight_advantages(out["advantages"], a_ret, self.args.retrieval_advantage_weight)
        f_ret = torch.tensor([row.retrieved_fraction for row in rows], dtype=torch.float32, device=device)
        out["rapo_log_ratio_shift"] = ratio_log_shift(f_ret, self.args.importance_shaping_weight)

        metrics = self._metrics["train"]
        retrieved = all_z.new_tensor([float(bool(row.retrievals)) for row in rows])
        all_retrieved = self.accelerator.gather(retrieved).bool()
        metrics["rapo/z_mean"].append(all_z[all_retrieved].mean().item() if all_retrieved.any() else 0.0)
        metrics["rapo/z_std"].append(all_z[all_retrieved].std().item() if all_retrieved.sum() > 1 else 0.0)
        metrics["rapo/a_ret_abs_mean"].append(a_ret_all.abs().mean().item())
        metrics["rapo/f_ret_mean"].append(self.accelerator.gather(f_ret).mean().item())
        metrics["rapo/z_positive_share"].append(
            (all_z[all_retrieved] > 0).float().mean().item() if all_retrieved.any() else 0.0
        )
        self._check_signal(rows)
        if self.args.grow_store and self.trace_store is not None:
            self._grow_store(inputs, rows)
        return out

    def _check_signal(self, rows: list[RolloutRow]) -> None:
        """One warning when every group has been flat, or most rows truncated, for several steps."""
        rewards_per_func = getattr(self, "_last_rewards_per_func", None)
        if rewards_per_func is None:
            return
        rewards = (rewards_per_func * self.reward_weights.to(rewards_per_func.device)).nansum(dim=1)
        truncated = self.accelerator.gather(
            torch.tensor([float(r.truncated) for r in rows], device=self.accelerator.device)
        )
        for message in self._signal_monitor.update(rewards.tolist(), self.num_generations, truncated.bool().tolist()):
            logger.warning("RAPO: %s", message)

    def _grow_store(self, inputs, rows: list[RolloutRow]) -> None:
        """Add each group's best policy trajectory (retrieved spans removed) when its reward is high enough."""
        rewards_per_func = getattr(self, "_last_rewards_per_func", None)
        if rewards_per_func is None or not hasattr(self.trace_store, "add_policy_trajectories"):
            return
        rewards = (rewards_per_func * self.reward_weights.to(rewards_per_func.device)).nansum(dim=1)
        start = self.accelerator.process_index * len(rows)
        chosen = []
        for first in range(0, rewards.numel(), self.num_generations):
            best = first + int(rewards[first : first + self.num_generations].argmax())
            local = best - start
            if 0 <= local < len(rows) and float(rewards[best]) >= self.args.grow_store_min_reward:
                chosen.append((local, float(rewards[best])))
        if not chosen:
            return
        prompts = [inputs[i]["prompt"] for i, _ in chosen]
        self.trace_store.add_policy_trajectories(
            prompts=prompts,
            completions=[self._tokenizer.decode(self._policy_view(rows[i]), skip_special_tokens=True) for i, _ in chosen],
            rewards=[reward for _, reward in chosen],
            question_ids=[
                str(inputs[i].get("question_id") or hashlib.sha1(prompt_text(p).encode()).hexdigest()[:16])
                for (i, _), p in zip(chosen, prompts)
            ],
            min_reward=float("-inf"),
            keep_top_k=1,
        )

    # ------------------------------------------------------------------ seam 3: shaped ratio

    def _compute_loss(self, model, inputs):
        if self.args.trim_padding:
            inputs = trim_padding_columns(inputs)
        shift = inputs.get("rapo_log_ratio_shift")
        if shift is None or not bool((shift != 0).any()):
            return super()._compute_loss(model, inputs)
        inputs = dict(inputs)  # the buffered batch stays unshifted
        shift = shift.unsqueeze(1)
        if inputs.get("old_per_token_logps") is not None:
            inputs["old_per_token_logps"] = inputs["old_per_token_logps"] - shift
            return super()._compute_loss(model, inputs)

        # Aligned generation: TRL would use per_token_logps.detach() as the old log-probs. Take them from
        # the same forward pass (no second one) and lower them by the shift.
        original = self._get_per_token_logps_and_entropies

        def with_shifted_old(*args, **kwargs):
            logps, entropies, aux = original(*args, **kwargs)
            inputs["old_per_token_logps"] = logps.detach() - shift
            return logps, entropies, aux

        self._get_per_token_logps_and_entropies = with_shifted_old
        try:
            return super()._compute_loss(model, inputs)
        finally:
            del self._get_per_token_logps_and_entropies

    # ------------------------------------------------------------------ checkpoints

    def _save_rng_state(self, output_dir):
        # Beside TRL's RNG state, inside Trainer._save_checkpoint: before trainer_state.json, the hub push and
        # checkpoint rotation, so none of them sees a checkpoint without it. Every process saves its own
        # retrieval RNG (they differ by seed).
        super()._save_rng_state(output_dir)
        self._save_rapo_state(output_dir)

    def _save_rapo_state(self, folder: str) -> None:
        """``rapo_state_{process}.json``: the rollout engine's RNG and the store it drew from, written
        atomically (a temp file in the same folder, then ``os.replace``)."""
        state = {"engine": self.rollout_engine.get_state(), "store": None}
        describe = getattr(self.trace_store, "describe", None)
        if describe is not None:
            try:
                state["store"] = describe()
            except Exception as error:  # noqa: BLE001 - a store that cannot say must not fail the checkpoint
                state["store"] = {"error": f"{type(error).__name__}: {error}"}
        os.makedirs(folder, exist_ok=True)
        name = RAPO_STATE_FILE.format(process=self.accelerator.process_index)
        temp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")  # same folder: os.replace stays atomic
        try:
            with open(temp, "w") as handle:
                json.dump(state, handle, default=str)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, os.path.join(folder, name))
        except BaseException:
            with suppress(OSError):
                os.unlink(temp)
            raise

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        name = RAPO_STATE_FILE.format(process=self.accelerator.process_index)
        path = os.path.join(checkpoint, name)
        try:
            with open(path) as handle:
                engine_state = json.load(handle)["engine"]
            self.rollout_engine.set_state(engine_state)
        except FileNotFoundError:
            problem = f"has no {name} (RAPO's rollout state)"
        except (OSError, ValueError, KeyError, TypeError) as error:
            problem = f"has an unreadable {name} ({type(error).__name__}: {error})"
        else:
            return
        # As TRL does for a missing RNG state: go on, and say what that costs.
        logger.warning(
            "RAPO: checkpoint %s %s; resuming with the retrieval RNG at its initial seed, so which rollouts retrieve "
            "and what they draw will differ from the interrupted run.", checkpoint, problem,
        )
