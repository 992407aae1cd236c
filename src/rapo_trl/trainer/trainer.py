"""RAPOTrainer: GRPOTrainer with step-wise hybrid rollouts and RAPO's objective (docs/design.md).

The TRL adapter of ``rapo_trl.core``: RAPO's maths lives there (``core.reference.reference_step`` is the whole step
for one group); this module wires it into GRPOTrainer's hooks, in the order a step runs. Every TRL method and
attribute it relies on is listed, and checked against the installed TRL, in ``rapo_trl.internals``.

TRL's hooks do not return to each other, so a step hands over state twice, each in one place
(docs/trl-integration.md):
- ``StepState`` (``step_state.py``) carries a step from ``_generate_and_score_completions`` through ``rollout_func``
  and ``_calculate_rewards`` back to it, checking each hand-over;
- ``LossForward`` (``loss_forward.py``) carries the shaped ratio's old log-probs from the loss's forward to TRL's
  loss, which reads them from its inputs.

A step:
1. ``_generate_and_score_completions`` opens the ``StepState`` with the step's input rows;
2. ``rollout_func`` (``_hybrid_rollout``): the rollout stage (``step_rollout.py``: plain, guided for failed groups,
   dynamic sampling) gives ids, env_mask and RAPO's per-row state;
3. ``_calculate_rewards``: reward functions see completions with retrieved spans removed;
4. back in ``_generate_and_score_completions``: advantages against the configured baseline (TRL's group statistics
   by default), reweighted by the retrieval reward, F_ret per row and the extra loss terms' tensors stored beside
   them in the batch;
5. ``_compute_loss``: TRL's loss on the shaped ratio (1 + m F_ret) r, plus the extra loss terms.
"""

from __future__ import annotations

import copy
import functools
import logging

import torch
from accelerate.utils import gather_object
from trl import GRPOTrainer
from trl.data_utils import is_conversational
from trl.extras.profiling import profiling_decorator

from rapo_trl.config import RAPOConfig
from rapo_trl.core.retrieval_rule import check_json_tools_reach, is_hybrid_row
from rapo_trl.hardware import with_frozen_weights_in_half
from rapo_trl.memory import with_freed_memory_release
from rapo_trl.model_card import RAPO_PAPER
from rapo_trl.padding import trim_padding_columns
from rapo_trl.rewards.view import policy_view
from rapo_trl.rollout import HybridRolloutEngine
from rapo_trl.signal_monitor import SignalMonitor
from rapo_trl.store.steps import prompt_text
from rapo_trl.tools.registry import tools_by_tag
from rapo_trl.trainer.advantages import baseline_advantages, retrieval_terms
from rapo_trl.trainer.backend import make_backend, rollout_config, vllm_kv_cache_awake
from rapo_trl.trainer.checks import (
    check_reward_scale,
    check_something_trains,
    check_store_before_training,
    check_user_vllm,
    checked_arguments,
    warn_if_learning_rate_too_low_for_peft,
    warn_if_nothing_to_retrieve,
    warn_if_options_ignored,
    warn_if_prompt_and_tools_differ,
    warn_on_lost_signal,
)
from rapo_trl.trainer.dynamic_sampling import PromptDraw, reward_logs_left_alone
from rapo_trl.trainer.environments import retire_overdue_environments, rows_as_queried, tools_per_row
from rapo_trl.trainer.loss_forward import RETRIEVED_FRACTION_KEY, LossForward
from rapo_trl.trainer.loss_terms import loss_terms
from rapo_trl.trainer.metrics import (
    CUMULATIVE_METRICS,
    gathered_max,
    gathered_mean,
    gathered_sum,
    rollout_metrics,
    signal_metrics,
)
from rapo_trl.trainer.model_card_writing import ModelCardMixin
from rapo_trl.trainer.resilience.checkpointing import CheckpointingMixin
from rapo_trl.trainer.resilience.growth_rollback import growth_tag, new_run_id
from rapo_trl.trainer.retrieval_view import completion_columns, retrieval_view_metrics
from rapo_trl.trainer.retrieved_logp import METRIC as RETRIEVED_LOGP_METRIC
from rapo_trl.trainer.retrieved_logp import RETRIEVED_TOKENS_KEY, retrieved_token_logp, retrieved_tokens
from rapo_trl.trainer.rewards import (
    bind_tool_tags,
    check_reward_columns,
    keep_retrieved_blocks,
    weighted_rewards,
)
from rapo_trl.trainer.shared_prompt import (
    ROW_KEY,
    regroups_micro_batches,
    rows_in_generation_order,
    scores_with_shared_prompts,
)
from rapo_trl.trainer.step_rollout import StepHooks, StepRollout, question_ids, roll_out_step
from rapo_trl.trainer.step_state import RolloutHandOverError, StepState
from rapo_trl.trainer.store_argument import as_trace_store
from rapo_trl.trainer.store_growth import best_of_each_group, check_store_growth, grow_store
from rapo_trl.trainer.tool_protocol import check_json_options, resolve_tool_protocol

logger = logging.getLogger("rapo_trl.trainer")


class RAPOTrainer(CheckpointingMixin, ModelCardMixin, GRPOTrainer):
    """Trainer for Retrieval-Augmented Policy Optimization (RAPO).

    A [`~trl.GRPOTrainer`] whose rollouts are step-wise and tool-using: the policy writes `<python>` /
    `<search>` calls (or JSON tool calls in its chat template, on TRL tools and environments), their results are
    appended as forced tokens, and in hybrid rollouts a step trace
    retrieved from `trace_store` may follow each tool step. The loss adds RAPO's retrieval reward
    (advantage reweighting) and retrieval-aware importance shaping.

    Args:
        model: model id, local path, or model object (as for GRPOTrainer).
        reward_funcs: reward function(s), e.g. ``rapo_trl.rewards.rapo_outcome_reward``. A reward that takes
            ``tool_tags`` and was not given them gets the tags of ``tools``, so a made-up tool call with a
            forged ``<result>`` fails its format check.
        args: a [`RAPOConfig`].
        tools: tag tools (``PythonTool``, ``SearchTool``, or your own ``Tool``) and plain typed functions
            with docstrings, as GRPOTrainer takes them (wrapped as ``FunctionTool``: the policy writes
            ``<name>{"arg": value}</name>``), run by RAPO's hybrid rollouts (not by GRPOTrainer's
            chat-template tool loop).
        rollout_func: accepted for signature parity with GRPOTrainer and refused with a clear error: RAPO's
            hybrid rollout is the rollout function.
        environment_factory: a TRL environment class (or a dict of them), as GRPOTrainer takes it: one environment
            per row, ``reset`` adds to the prompt, its public methods are JSON tool calls in the model's chat
            template, ``get_reward`` a reward. With it (or with plain functions in ``tools`` the prompts do not teach
            as tags) the policy calls tools in the chat template's JSON format (``RAPOConfig.tool_protocol``).
        trace_store: a ``TraceStore`` (or anything with ``select(contexts)``), or the folder of a built store (opened
            as ``TraceStore(path, must_exist=True)``); ``None`` trains without retrieval, i.e. agentic GRPO.
        vllm_llm: an existing ``vllm.LLM`` to generate with (adapter-only sync for LoRA), with ``args.use_vllm``
            off and ``args.vllm_importance_sampling_correction=False`` (TRL's correction applies to its own engine
            only); ``args.use_vllm`` alone generates on the trainer's colocated engine.
        The other arguments are GRPOTrainer's, with the same names, order and meaning
        (``quantization_config`` included, e.g. for QLoRA); RAPO's own come after them.
    """

    _tag_names = ["trl", "rapo", "rapo_trl"]
    _name = "RAPO"
    _paper = RAPO_PAPER  # TRL's model card reads the paper's title, id and citation here

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
        args = checked_arguments(model, args, train_dataset, rollout_func=rollout_func)
        check_user_vllm(args, vllm_llm)
        check_reward_columns(reward_funcs, train_dataset)
        trace_store = as_trace_store(trace_store)
        check_reward_scale(args, trace_store)
        # Checked before the model loads: a bad tool fails fast.
        self.tool_protocol = resolve_tool_protocol(args.tool_protocol, tools, environment_factory, train_dataset)
        """``"tags"`` or ``"json"``: how this trainer's policy calls tools (``RAPOConfig.tool_protocol``)."""
        check_json_options(args, environment_factory)
        json_tools = self.tool_protocol == "json"
        if json_tools:  # the rollout's config checks it too, but only once the model has loaded
            check_json_tools_reach(args.retrieve_at)
        # Tag tools run in RAPO's engine only; JSON tools and environments are TRL's to set up (their schemas in the
        # prompt, the response parser, one environment per row, get_reward as a reward) and RAPO's engine runs them.
        self.rapo_tools = [] if json_tools else list(tools_by_tag(tools).values())
        tool_tags = [tool.tag for tool in self.rapo_tools]
        args = with_frozen_weights_in_half(model, args, peft_config, quantization_config)
        if not json_tools:
            reward_funcs = bind_tool_tags(reward_funcs, tool_tags)
            if args.score_retrieved_blocks:
                reward_funcs = keep_retrieved_blocks(reward_funcs)
        super().__init__(
            model,
            reward_funcs,
            args=args,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            reward_processing_classes=reward_processing_classes,
            callbacks=with_freed_memory_release(callbacks, args.device),
            optimizers=optimizers,
            quantization_config=quantization_config,
            peft_config=peft_config,
            **({"tools": tools, "environment_factory": environment_factory} if json_tools else {}),
        )
        if self.ref_model is not None:
            # TRL reads the reference only under no_grad but leaves its parameters trainable; frozen, no backward (a
            # callback's, a custom loss term's) can reach it or leave gradients on it.
            self.ref_model.requires_grad_(False)
        self.trace_store = trace_store
        check_store_growth(trace_store, args, self.accelerator.num_processes)
        protocol = (
            {"tool_protocol": "json", "chat_template": self.chat_template, "chat_template_kwargs": self.chat_template_kwargs}
            if json_tools
            else {}
        )
        self.rollout_engine = HybridRolloutEngine(
            self._tokenizer,
            make_backend(self, vllm_llm),
            self._standalone_tools if json_tools else self.rapo_tools,
            trace_store,
            rollout_config(args, **protocol),
            seed=args.seed + self.accelerator.process_index,
        )
        # Set after init: TRL warns about rollout_func passed to the constructor (docs/trl-integration.md).
        self.rollout_func = self._hybrid_rollout
        self.step_state: StepState | None = None
        """The step being generated and scored, from ``_generate_and_score_completions``' start to its end."""
        self.last_rollout: StepState | None = None
        """The last scored step (rows, mode, weighted rewards), for inspection."""
        self._loss_forward: LossForward | None = None  # the loss's one forward, while TRL's loss runs
        self.loss_terms = loss_terms(args)
        """Extra loss terms the config turns on, added to TRL's policy loss (``trainer/loss_terms.py``)."""
        self.base_model_id: str | None = None
        """Hub id of the base model for the model card, when the model was loaded from a local folder."""
        self.dataset_id: str | None = None
        """Hub id of the dataset trained on, the model card's ``datasets`` (TRL's ``dataset_name``), when there is
        one."""
        self._signal_monitor = SignalMonitor(patience=args.signal_loss_patience, json_calls_on_workers=json_tools
                                             and args.json_tool_timeout is not None)
        self._prompt_draw = PromptDraw(train_dataset, args.seed) if args.dynamic_sampling_max_rounds else None
        self.growth_run = new_run_id()
        """Tags the records this run grows into the store; a resume takes it from the checkpoint."""
        self.run_id: str | None = None
        """The ``rapo train`` run's id, its record's (``rapo_trl.cli.run_record``), saved in each checkpoint: a bare
        resume takes the checkpoints of the run the output_dir's record names. ``None`` from Python."""
        if self.accelerator.is_main_process:
            warn_if_learning_rate_too_low_for_peft(
                self.accelerator.unwrap_model(self.model), args.learning_rate
            )
            warn_if_options_ignored(args, self.tool_protocol, trace_store)
            if not json_tools:
                warn_if_prompt_and_tools_differ(train_dataset, tool_tags)

    def train(self, *args, **kwargs):
        check_something_trains(self.model)
        check_store_before_training(self.trace_store)
        if self.accelerator.is_main_process:
            tag_tools = None if self.tool_protocol == "json" else [tool.tag for tool in self.rapo_tools]
            warn_if_nothing_to_retrieve(self.args, self.trace_store, self.train_dataset, tag_tools)
        return super().train(*args, **kwargs)

    # ------------------------------------------------------------------ a step: generate and score

    def _generate_and_score_completions(self, inputs):
        self.step_state = step = StepState(inputs=inputs)  # TRL scores this list: replacement rows go into it
        try:
            out = super()._generate_and_score_completions(inputs)
        finally:
            self.step_state = None  # a step that failed (e.g. in a reward) leaves nothing behind
        step.check_scored(len(out["advantages"]))
        out[ROW_KEY] = torch.arange(len(out["advantages"]), device=out["advantages"].device)
        self.last_rollout = step
        if step.mode != "train":
            return out
        advantages = baseline_advantages(step.rows, step.rewards, out["advantages"], self.accelerator,
                                         self.num_generations, self.args.advantage_baseline)
        out["advantages"], out[RETRIEVED_FRACTION_KEY], metrics = retrieval_terms(
            step.rows, advantages, self.accelerator, self.num_generations, self.args
        )
        if self.trace_store is not None:
            out[RETRIEVED_TOKENS_KEY] = retrieved_tokens(step.rows, out["completion_mask"])
        for term in self.loss_terms:
            out[term.key], term_metrics = term.batch_field(
                step.rows, out["advantages"], out["completion_mask"]
            )
            metrics.update(  # counts of this process's rows: the log shows every process's, summed
                {name: gathered_sum(self.accelerator, value) for name, value in term_metrics.items()}
            )
        metrics.update(
            signal_metrics(step.rewards, self.num_generations),
            **retrieval_view_metrics(
                step.rows, question_ids(inputs), step.rewards, self.accelerator, out["advantages"]
            ),
        )
        self._log_metrics("train", metrics)
        warn_on_lost_signal(
            self._signal_monitor, step.rows, step.rewards, self.num_generations, self.accelerator
        )
        if self.args.store_growth_min_reward is not None and self.trace_store is not None:
            start = self.accelerator.process_index * len(step.rows)
            chosen = best_of_each_group(
                step.rewards, self.num_generations, start, len(step.rows), self.args.store_growth_min_reward
            )
            grow_store(
                self.trace_store,
                rows_as_queried(self, inputs, step.prompts),
                step.rows,
                chosen,
                self._tokenizer,
                self.rollout_engine.store_outage,
                growth_tag(self.growth_run, self.state.global_step + 1),
                [tool.tag for tool in self.rapo_tools],
            )
        return out

    def _hybrid_rollout(self, prompts: list, trainer=None) -> dict:
        """``rollout_func``: the rows as TRL takes them. RAPO's per-row state goes to the step's ``StepState`` (the
        hybrid rows' retrievals, entropies and F_ret, read back by ``_calculate_rewards`` and the advantages); called
        outside a step it is dropped (``roll_out_prompts`` returns it)."""
        step = self.step_state
        if step is not None and step.rows is not None:
            raise RolloutHandOverError("RAPO: rollout_func ran twice before its completions were scored.")
        rollout = self.roll_out_prompts(prompts, step.inputs if step is not None else None)
        if step is not None:
            step.rolled_out(rollout.rows, "train" if self.model.training else "eval", rollout.replaced)
            step.prompts = prompts
        retire_overdue_environments(self)
        if self.log_completions and step is not None:
            for column, values in completion_columns(rollout.rows).items():
                self._log_completion_extra(column, values)
        rows = rollout.rows
        use_logprobs = all(row.logprobs is not None for row in rows)
        # Only TRL's keys: it would copy extra keys into rows and reward kwargs. RAPO's state is the step's.
        return {
            "prompt_ids": [row.prompt_ids for row in rows],
            "completion_ids": [row.completion_ids for row in rows],
            "logprobs": [row.logprobs for row in rows] if use_logprobs else None,
            "env_mask": [row.env_mask for row in rows],
        }

    def _generate(self, prompts: list):
        # With JSON tools TRL would run its own tool loop over what the hybrid rollout returns (tools run twice, the
        # env_mask dropped): the rollout has run them already, so TRL sees no tools while it takes the rollout's rows.
        tools, self.tools = self.tools, []
        self._tools_hidden_from_trl = tools
        try:
            return super()._generate(prompts)
        finally:
            self.tools, self._tools_hidden_from_trl = tools, None

    def _tokenize_prompts(self, prompts: list):
        # The prompt still shows the JSON tools' schemas, as GRPOTrainer renders them, while _generate hides the
        # tools from TRL's tool loop.
        hidden = getattr(self, "_tools_hidden_from_trl", None)
        if not hidden:
            return super()._tokenize_prompts(prompts)
        self.tools = hidden
        try:
            return super()._tokenize_prompts(prompts)
        finally:
            self.tools = []

    def roll_out_prompts(self, prompts: list, inputs: list[dict] | None = None) -> StepRollout:
        """Roll out this process's ``prompts`` (each repeated per group, as TRL passes them) as a training or an
        evaluation step does, and log the rollout's metrics. ``inputs``: the step's training rows, which guided
        retrieval and dynamic sampling need (dynamic sampling writes its replacement rows into them)."""
        training = self.model.training
        group = self.num_generations if training else self.num_generations_eval
        offset = self.accelerator.process_index * len(prompts)
        hybrid = [
            training and is_hybrid_row(offset + i, group, self.args.num_hybrid_generations)
            for i in range(len(prompts))
        ]
        prompt_ids, _, _ = self._tokenize_prompts(prompts)
        engine = self.rollout_engine
        retrieve_prob = self.current_retrieve_prob()
        prefixes = [prompt_text(p) + "\n" for p in prompts]
        row_tools = tools_per_row(self, prompts)
        with vllm_kv_cache_awake(self):
            if training:
                inputs = inputs if inputs is not None and len(inputs) == len(prompts) else None
                rollout = roll_out_step(
                    engine,
                    inputs,
                    prompt_ids,
                    prefixes,
                    hybrid,
                    group_size=group,
                    offset=offset,
                    retrieve_prob=retrieve_prob,
                    args=self.args,
                    hooks=self._step_hooks(prompts, inputs, retrieve_prob),
                    row_tools=row_tools,
                )
            else:
                plain = engine.roll_out(prompt_ids, prefixes, hybrid, retrieval_enabled=False, row_tools=row_tools)
                rollout = StepRollout(plain.rows, plain.stats)
        mean = functools.partial(gathered_mean, self.accelerator)
        # Evaluation retrieves nothing: its p is 0, and the store-error count is training's, not the evaluation's.
        metrics = rollout_metrics(rollout.rows, rollout.stats, engine.store_errors, retrieve_prob if training else 0.0,
                                  mean, functools.partial(gathered_sum, self.accelerator),
                                  functools.partial(gathered_max, self.accelerator))
        if not training:
            del metrics["rapo/store_errors"]
        self._log_metrics("train" if training else "eval", {**rollout.metrics, **metrics})
        return rollout

    def _step_hooks(self, prompts: list, inputs: list[dict] | None, retrieve_prob: float) -> StepHooks:
        """What the rollout stage needs of this trainer: scoring, gathering, and drawing and rolling out prompts."""
        conversational = is_conversational({"prompt": prompts[0]})
        filler: list = []  # an (input row, rollout row) pair, padding a process with fewer rows to score

        def score(rows_in, rows):
            if rows:
                filler[:] = [(rows_in[0], rows[0])]
            return self._score_rows(rows_in, rows, conversational, filler=filler[0] if filler else None)

        def draw(n, round_, exclude):
            # Generations before this one in the same optimizer step (TRL's micro-step count, restored on resume).
            generation = (self._step % self.args.gradient_accumulation_steps) // (
                self.args.steps_per_generation * self.num_iterations
            )
            drawn = self._prompt_draw.for_all_processes(
                n,
                step=self.state.global_step,
                round_=round_,
                exclude=exclude,
                rank=self.accelerator.process_index,
                gather=gather_object,
                generation=generation,
            )
            return [{column: row[column] for column in inputs[0]} for row in drawn]

        def roll_out_rows(candidates, flags):
            texts = copy.deepcopy([row["prompt"] for row in candidates])
            rollout = self.rollout_engine.roll_out(
                self._tokenize_prompts(texts)[0],
                [prompt_text(p) + "\n" for p in texts],
                flags,
                retrieval_enabled=True,
                question_ids=question_ids(candidates),
                retrieve_prob=retrieve_prob,
            )
            tokens.append(sum(len(row.completion_ids) for row in rollout.rows))
            return rollout.rows, rollout.stats

        tokens: list[int] = []
        device = self.accelerator.device
        return StepHooks(
            score=score,
            gather=lambda t: self.accelerator.gather(t.to(device)),
            mean=functools.partial(gathered_mean, self.accelerator),
            total=functools.partial(gathered_sum, self.accelerator),
            draw=draw if self._prompt_draw else None,
            roll_out_rows=roll_out_rows,
            extra_tokens=tokens,
        )

    def _score_rows(self, inputs: list[dict], rows: list, conversational: bool, filler=None) -> torch.Tensor:
        """Weighted rewards of ``rows`` (this process's), scored as ``_calculate_rewards`` scores the step's rows
        but outside the step's batch: nothing reaches TRL's logs. Every process calls it together (TRL gathers the
        rewards), padded to the longest process's row count with ``filler`` (an input row and its rollout row)."""
        count = len(rows)
        width = int(self.accelerator.gather(torch.tensor([count], device=self.accelerator.device)).max())
        if width > count:
            inputs, rows = (
                list(inputs) + [filler[0]] * (width - count),
                list(rows) + [filler[1]] * (width - count),
            )
        completions, policy_ids = self._reward_view(rows, conversational)
        with reward_logs_left_alone(self):
            rewards_per_func = super()._calculate_rewards(
                inputs, [row["prompt"] for row in inputs], completions, policy_ids
            )
        start = self.accelerator.process_index * width
        return weighted_rewards(rewards_per_func[start : start + count], self.reward_weights)

    def _reward_view(self, rows: list, conversational: bool) -> tuple[list, list[list[int]]]:
        """What reward functions score: the policy's trajectory (``policy_view``: retrieved blocks removed by token
        span unless ``score_retrieved_blocks``, stored steps inserted as its own kept), as chat messages when the
        prompts are conversational, and its token ids."""
        policy_ids = [policy_view(row, self.args.score_retrieved_blocks) for row in rows]
        if self.tool_protocol == "json":  # TRL's messages: each turn parsed, each tool result a tool message
            return [copy.deepcopy(row.messages) for row in rows], policy_ids
        texts = self.processing_class.batch_decode(policy_ids, skip_special_tokens=True)
        completions = (
            [[{"role": "assistant", "content": text}] for text in texts] if conversational else texts
        )
        return completions, policy_ids

    def current_retrieve_prob(self) -> float:
        """p at the current step: constant, or decayed to ``retrieve_prob_final``."""
        return self.args.retrieve_prob_at(self.state.global_step, self.state.max_steps)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        step = self.step_state
        if step is None or step.rows is None:
            raise RolloutHandOverError(
                "RAPO: _calculate_rewards ran without a pending rollout from rollout_func."
            )
        step.apply_replacements(inputs, prompts)
        # Reward functions see the policy's trajectory: retrieved blocks removed by token span (``_reward_view``).
        conversational = bool(completions) and isinstance(completions[0], list)
        completions, policy_ids = self._reward_view(step.rows, conversational)
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, policy_ids)
        step.score(completion_ids_list, rewards_per_func, self.reward_weights)
        return rewards_per_func

    def _log_metrics(self, mode: str, metrics: dict[str, float]) -> None:
        for name, value in metrics.items():
            if name in CUMULATIVE_METRICS:  # a running count: the log shows its latest value, not a mean of them
                self._metrics[mode][name] = [value]
            else:
                self._metrics[mode][name].append(value)

    # ------------------------------------------------------------------ a step: the loss

    def _prepare_inputs(self, generation_batch):
        generated = self.model.training and (
            self._buffered_inputs is None
            or self._step % (self.args.steps_per_generation * self.num_iterations) == 0
        )
        inputs = super()._prepare_inputs(generation_batch)
        if generated and self._regroups_micro_batches():
            self._buffered_inputs = rows_in_generation_order(self._buffered_inputs)
            inputs = self._buffered_inputs[self._step % self.args.steps_per_generation]
        return inputs

    def _regroups_micro_batches(self) -> bool:
        return regroups_micro_batches(self.args, self.num_iterations, self.aux_loss_enabled)

    @profiling_decorator
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        # Explicitly through _compute_loss whatever the config (use_liger_kernel only swaps layer kernels in
        # TRL 1.16): a loss path that skipped it would drop the shaped ratio without a word.
        if return_outputs:
            raise ValueError("RAPOTrainer, like GRPOTrainer, does not return outputs from compute_loss.")
        return self._compute_loss(model, inputs)

    def _compute_loss(self, model, inputs):
        """TRL's policy loss on RAPO's shaped ratio (1 + m F_ret) r, plus the extra loss terms in the batch.

        TRL's loss computes the ratio exp(logps - old_logps) and clips it; the loss forward (``LossForward``) hands
        it old log-probs lowered by log(1 + m F_ret) (``core.objective.shaped_old_logps``), so the ratio it clips is
        the shaped one.
        """
        inputs = trim_padding_columns(inputs, self.args.pad_to_multiple_of)
        inputs = dict(
            inputs
        )  # the loss forward writes the shaped old log-probs here; the buffered batch stays
        forward = LossForward(inputs, inputs.get(RETRIEVED_FRACTION_KEY), self.args.importance_shaping_weight)
        self._loss_forward = forward
        try:
            loss = super()._compute_loss(model, inputs)
        finally:
            self._loss_forward = None
        forward.check_used()
        if RETRIEVED_TOKENS_KEY in inputs:
            logp = retrieved_token_logp(forward.logps, inputs[RETRIEVED_TOKENS_KEY], self.accelerator)
            if logp is not None:
                self._metrics["train"][RETRIEVED_LOGP_METRIC].append(logp)
        for term in self.loss_terms:
            if term.key not in inputs:  # evaluation batches carry no term
                continue
            extra = term.loss(forward.logps, inputs[term.key], self._token_mean_normalizer(inputs))
            self._metrics["train"][term.metric].append(self._step_scale_value(extra))
            loss = loss + extra
        return loss

    def _step_scale_value(self, micro_batch_term: torch.Tensor) -> float:
        """A loss term of this micro-batch as the figure of the whole optimizer step: its share of the step's term
        (normalised over the accumulation window, like TRL's loss) times the window's micro-batches, since the log
        averages the micro-batches' figures rather than summing them; the mean over processes, as DDP averages
        their gradients."""
        share = self.accelerator.gather(micro_batch_term.detach()).mean()
        return share.item() * self.current_gradient_accumulation_steps

    def _token_mean_normalizer(self, inputs) -> torch.Tensor:
        """The DAPO token mean's denominator for this micro-batch, whatever the loss type, so an extra term's token
        weighs like a sampled token of the same advantage."""
        normalizer = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
        return normalizer * self.current_gradient_accumulation_steps / self.args.steps_per_generation

    def _get_per_token_logps_and_entropies(
        self,
        model,
        input_ids,
        attention_mask,
        logits_to_keep,
        batch_size=None,
        compute_entropy=False,
        compute_aux_loss=False,
        **side_inputs,
    ):
        scored = None
        # pad_to_multiple_of bounds the shapes the forward sees; the shared prompt forward's are each prompt's own.
        shares_prompts = self.args.pad_to_multiple_of is None
        if shares_prompts and not compute_aux_loss and all(v is None for v in side_inputs.values()):

            def trl_scores(ids, mask):
                return super(RAPOTrainer, self)._get_per_token_logps_and_entropies(
                    model, ids, mask, logits_to_keep, compute_entropy=compute_entropy
                )

            scored = scores_with_shared_prompts(
                model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, trl_scores,
                self.accelerator.autocast,
            )
        if scored is None:
            scored = super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss,
                **side_inputs,
            )
        if self._loss_forward is not None:
            self._loss_forward.apply(scored[0])
        return scored
