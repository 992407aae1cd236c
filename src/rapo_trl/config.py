"""RAPOConfig: GRPOConfig plus RAPO's fields, with RAPO's defaults."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field

from trl import GRPOConfig

from rapo_trl.core.advantage_baselines import DEFAULT_BASELINE, checked_baseline
from rapo_trl.core.objective import checked_retrieved_token_credit
from rapo_trl.core.retrieval_rule import check_own_step_reach, checked_boundaries, scheduled_retrieve_prob
from rapo_trl.hardware import default_precision, trainer_device
from rapo_trl.ranges import RAPO_RANGES, check_ranges
from rapo_trl.rollout.entropy import STEP_ENTROPY_ESTIMATORS


@dataclass
class RAPOConfig(GRPOConfig):
    r"""
    Configuration for [`RAPOTrainer`] (Retrieval-Augmented Policy Optimization, arXiv 2603.03078).

    Everything of [`~trl.GRPOConfig`] applies; the RAPO fields are grouped below. The defaults follow
    the paper: DAPO token-mean loss, clip 0.2/0.28, dual clip 3, no KL.

    > Precision

    bf16 (`bool` or `None`, *optional*, defaults to `None`):
        bf16 mixed precision. `None` chooses from the hardware the trainer runs on (`rapo_trl.hardware`):
        bf16 where the GPU supports it natively, fp16 (`fp16=True`) on GPUs without it such as the T4; on the
        CPU (also with `use_cpu=True`) bf16 where it has AVX512-BF16 or AMX-BF16, else fp32. With LoRA and a
        model given by id or path, the frozen base weights then load in that half type and the adapters stay
        fp32. An explicit `bf16` or `fp16=True` wins.

    > Names

    One prefix per concept: `retrieve_*` says when and where a hybrid rollout retrieves; `retrieved_*` what the loss
    does with the retrieved tokens; `retrieval_*`, `importance_shaping_*` and `step_entropy_*` make the paper's
    retrieval reward and ratio; `max_*` are budgets, as in TRL; `dynamic_sampling_*` and `signal_loss_*` are about
    groups without reward signal; `store_*` about the trace store during training. The rest say what they are
    (`num_hybrid_generations` beside TRL's `num_generations`, `tool_workers`, `answer_stop`,
    `score_retrieved_blocks`). A setting that can be off is off at 0 or `None`, never by a second switch. How a
    store selects a step (top k, minimum reward, fallback text) is the store's own
    [`~rapo_trl.store.StoreConfig`]: the trainer uses the store as it is given.

    > Hybrid rollouts

    num_hybrid_generations (`int` or `None`, *optional*, defaults to `None`):
        Rollouts per group that may retrieve (N_hybrid). `None` means half of `num_generations`.
    retrieve_prob (`float`, *optional*, defaults to `0.5`):
        Probability p of inserting a retrieved step after each completed tool step of a hybrid rollout.
    retrieve_prob_final (`float` or `None`, *optional*, defaults to `None`):
        `None`: p stays `retrieve_prob` throughout (the paper). A value: p decays linearly from `retrieve_prob` to
        it at the last step (e.g. 0 anneals guidance away).
    retrieve_own_question (`bool`, *optional*, defaults to `False`):
        Retrieve among the records of the row's own question (the dataset's `question_id` column) where the store
        holds any, else by similarity over all records (the paper). Needs a store whose `select` takes
        `question_ids`, such as `TraceStore`.

    > Guided retrieval (beyond the paper; each off by default)

    retrieve_at (`list[str]`, *optional*, defaults to `["tool_step"]`):
        Step boundaries where a hybrid rollout draws a retrieval: `"tool_step"`, after each completed tool
        step (the paper); `"plan"`, once the policy closes its first plan (`</think>`), before its first tool
        call, queried with the question (docs/design.md, Guided retrieval); `"first_tool_step"`, after a rollout's
        first completed tool step only: one stored step to get it going, then the policy on its own; `"start"`,
        before the policy writes anything: the question's stored first step begins the completion, queried with the
        question. With JSON tool calls, `"tool_step"` and `"first_tool_step"` only (`rapo_trl.core.retrieval_rule`).
    retrieved_step_as_own (`bool`, *optional*, defaults to `False`):
        Insert a stored step as the policy's own step: without the preface and the `<retrieve>` tags, scored by the
        reward functions with the rest of the trajectory (its answer is the rollout's answer, and one that closes the
        answer ends the rollout). With `retrieve_at: [start]`, an off-policy prefix (LUFFY, Prefix-RFT); with
        `retrieved_token_loss_weight`, its own text is learned. The fallback text stays a `<retrieve>` block. Not with
        `"plan"` (a stored step opens with a plan of its own) nor with JSON tool calls.
    retrieve_failed_groups_max_reward (`float` or `None`, *optional*, defaults to `None`):
        `None`: every group may retrieve (the paper). A value: retrieve only in groups whose on-policy rollouts all
        failed, i.e. scored at or below this reward (BREAD, Guide-GRPO). Every row rolls out on-policy first, in one
        batch; the hybrid rows of failed groups then roll out again, retrieving. Not with dynamic sampling.
    retrieved_token_loss_weight (`float`, *optional*, defaults to `0.0`):
        w of a loss `-w * A * f(pi(token))` on the retrieved steps' own tokens in rollouts with A > 0 (UFT,
        LUFFY), normalized like DAPO's token mean; the behaviour probability is taken as 1, so the ratio is pi
        itself, shaped by `retrieved_token_shaping` (docs/design.md, Guided retrieval). 0 disables it.
    retrieved_token_shaping (`float` or `None`, *optional*, defaults to `0.1`):
        gamma of LUFFY's policy shaping f(p) = p / (p + gamma), which keeps the gradient of low-probability
        guided tokens from vanishing. `None`: f(p) = log p, UFT's likelihood term.
    retrieved_token_credit (`str`, *optional*, defaults to `"advantage"`):
        What weights that loss on a retrieved step. `"advantage"`: the row's advantage A, only in rows with A > 0
        (the row's success vouches for the step). `"stored_reward"`: the reward R > 0 of the stored trajectory the
        step came from, in every row shown it, whatever the row then scored (the store's success vouches for it:
        supervised learning of the guidance interleaved with RL, as ReLIFT and SRFT), so a guided row that still
        fails teaches its stored step too.

    advantage_baseline (`str`, *optional*, defaults to `"group"`):
        Which rows of a group set the mean and std of the outcome advantage (R - mean) / (std + eps)
        (`rapo_trl.core.advantage_baselines`). `"group"`: every row, as GRPO and the paper (TRL computes it, with
        its `scale_rewards`). `"on_policy"`: only the rows not shown a stored step, applied to every row of the
        group (LUFFY's on-policy statistics), so a hybrid row's success does not push the on-policy rows below
        zero; a std of 0 counts as 1, and a group with no on-policy row uses the whole group's statistics. Needs
        TRL's defaults `scale_rewards="group"` and `multi_objective_aggregation="sum_then_normalize"`.

    > Tools and budgets

    tool_protocol (`str`, *optional*, defaults to `"auto"`):
        How the policy calls tools. `"tags"`: the paper's inline `<python>...</python>` calls in one assistant
        message. `"json"`: JSON tool calls in the model's own chat template (Qwen2.5/3, Llama 3.x, ...), as TRL's
        `GRPOTrainer(tools=[fn])` and `environment_factory` run them; each result comes back as the template's tool
        message. `"auto"`: `"json"` with an `environment_factory`, or with only plain functions as tools that the
        training prompts do not teach as tags; `"tags"` otherwise (`rapo_trl.trainer.tool_protocol`).
    max_tool_calls (`int`, *optional*, defaults to `3`):
        Tool calls executed per rollout; later calls get a notice instead of a result.
    max_turn_tokens (`int`, *optional*, defaults to `512`):
        Tokens the policy may sample in one step; a step reaching it ends the rollout as truncated.
        `max_completion_length` bounds the whole completion, forced tokens included.
    tool_workers (`int`, *optional*, defaults to `8`):
        Tool calls run concurrently across rows.
    json_tool_timeout (`float` or `None`, *optional*, defaults to `30.0`):
        Seconds a JSON tool or environment call may take, each on a worker thread: past it the call fails (the
        policy sees the error) and the rollout goes on. `None`: calls run one after another on the trainer's
        thread with no timeout, as TRL's `GRPOTrainer` runs them; for environments whose methods need the thread
        that made them (a `sqlite3` connection opened in `reset`, `signal.alarm`). Tag tools keep their own timeouts.
    max_tool_result_chars (`int` or `None`, *optional*, defaults to `4000`):
        A tool's or environment's output longer than this many characters is cut before it is shown to the policy,
        keeping its head and tail around a note of how much was cut (a result fills the completion budget, which
        every later step shares). `None`: shown whole, as TRL's `GRPOTrainer` shows it.
    answer_stop (`str` or `None`, *optional*, defaults to `"</answer>"`):
        A turn that closes the final answer ends the rollout there, EOS or not. `None`: only EOS ends it.
    max_retrieved_tokens (`int` or `None`, *optional*, defaults to `None`):
        Retrieved blocks longer than this are skipped (never cut), like blocks that do not fit the
        remaining completion budget. `None`: no cap beyond the budget.

    > Objective

    retrieval_advantage_weight (`float`, *optional*, defaults to `0.2`):
        a in A = A_acc * (1 + a * A_ret). 0 disables the retrieval reward.
    retrieval_advantage_epsilon (`float`, *optional*, defaults to `1e-6`):
        eps in A_ret = (Z - mean_G Z) / (std_G Z + eps): the paper's 1e-6 (A_acc keeps TRL's 1e-4). Raise it
        to mute retrieval rewards from near-identical entropies.
    importance_shaping_weight (`float`, *optional*, defaults to `0.05`):
        m in r_hat = (1 + m * F_ret) * r. 0 disables importance shaping.
    step_entropy (`str`, *optional*, defaults to `"topk"`):
        Step entropy estimator for the retrieval reward: `"topk"` (reference code: the sum of the top-k estimator
        over the step's first tokens), `"topk_mean"` (its mean) or `"full"` (paper: mean full entropy).
    step_entropy_first_tokens (`int`, *optional*, defaults to `20`):
        Tokens per step the `"topk"` and `"topk_mean"` estimators use.
    step_entropy_top_k (`int`, *optional*, defaults to `10`):
        Log-probs per token the `"topk"` and `"topk_mean"` estimators use.
    score_retrieved_blocks (`bool`, *optional*, defaults to `False`):
        Whether reward functions see the retrieved blocks. By default they are removed (by token span)
        before scoring, so a retrieved `<answer>` cannot be counted as the policy's. On, RAPO's outcome reward
        scores them too (a handed answer and the policy's own are two answers: a format failure, as the
        reference code scores them). A stored step inserted as the policy's own (`retrieved_step_as_own`) is no
        block: it is always scored.

    > Groups without signal (beyond the paper)

    dynamic_sampling_max_rounds (`int`, *optional*, defaults to `0`):
        DAPO's dynamic sampling (arXiv 2503.14476; `max_num_gen_batches` there), up to this many extra rollout
        rounds per step; 0 turns it off. A group whose rewards are all equal has zero advantage and teaches
        nothing, so within the same step its prompt is replaced. Prompts drawn from `train_dataset` (one draw for all
        processes, seeded by `seed`, the step (and the generation within it) and the round, each process taking its
        slice; never a prompt already in the step) are rolled out, scored by the reward functions, and a replacement
        group with unequal rewards takes the flat group's rows, prompt and dataset row (so its own answer columns score
        it). Groups still flat after the last round are kept (zero advantage). Each round costs one more rollout per
        flat group. Needs each process's generation batch to hold whole groups (`per_device_train_batch_size *
        steps_per_generation` a multiple of `num_generations`) and a map-style dataset. TRL 1.16 has no equivalent
        option. Logged: `dynamic_sampling/*`, and in every run `rapo/step_has_signal`.
    signal_loss_patience (`int`, *optional*, defaults to `3`):
        After this many consecutive steps in which every group's rewards are equal (no advantage, no
        gradient), or most rollouts were truncated, the trainer logs one warning saying what to change.
        0 disables the warning.

    > The trace store during training

    store_growth_min_reward (`float` or `None`, *optional*, defaults to `None`):
        `None`: the store is read only (the paper). A value: after scoring, the policy's best trajectory of each
        group is added to the trace store when its reward is at least this (beyond the paper).
    store_outage_max_steps (`int` or `None`, *optional*, defaults to `None`):
        Training steps the trace store may stay unreachable (e.g. its `chroma run` server down) before the run
        stops, with a checkpoint saved at that step and an error saying how to resume (docs/reliability.md).
        `None`: the run goes on as agentic GRPO (rows that would retrieve go on on-policy) with a warning at every
        logging step, and retrieval resumes by itself when the store answers again.

    The loss forward always drops the columns that are padding in every row of a micro-batch
    (`rapo_trl.padding`; with `pad_to_multiple_of`, down to multiples of it) and runs each distinct prompt of a
    micro-batch once (`rapo_trl.trainer.shared_prompt`; TRL's row-by-row forward where the model cannot take the
    shared cache, and with `pad_to_multiple_of`): the loss and gradients are TRL's to float rounding.
    """

    # Same default (None) as TRL, but None is resolved from the hardware in __post_init__.
    bf16: bool | None = field(
        default=None,
        metadata={"help": "bf16 mixed precision. None: from the hardware (bf16 where supported, fp16 on GPUs "
                  "without it, fp32 on CPU)."},
    )
    # RAPO's defaults for inherited fields (docs/design.md, "Loss").
    loss_type: str = field(default="dapo", metadata={"help": "Loss aggregation; RAPO uses DAPO's token mean."})
    epsilon: float = field(default=0.2, metadata={"help": "Lower clip range."})
    epsilon_high: float | None = field(default=0.28, metadata={"help": "Upper clip range (clip-higher)."})
    delta: float | None = field(default=3.0, metadata={"help": "Dual clip bound c for negative advantages."})
    beta: float = field(default=0.0, metadata={"help": "KL coefficient; RAPO trains without KL."})

    num_hybrid_generations: int | None = field(
        default=None, metadata={"help": "Hybrid rollouts per group; None: num_generations // 2."}
    )
    retrieve_prob: float = field(default=0.5, metadata={"help": "Retrieval probability p after a tool step."})
    retrieve_prob_final: float | None = field(
        default=None, metadata={"help": "p at the last step, decayed to linearly from retrieve_prob (None: constant p)."}
    )
    retrieve_own_question: bool = field(
        default=False, metadata={"help": "Retrieve among the records of the row's own question where the store has any."}
    )
    retrieve_at: list[str] = field(
        default_factory=lambda: ["tool_step"],
        metadata={"help": "Where hybrid rollouts draw a retrieval: tool_step (paper), plan (after the first plan), "
                          "first_tool_step (after the first tool step only), start (before the policy writes)."},
    )
    retrieved_step_as_own: bool = field(
        default=False,
        metadata={"help": "Insert stored steps as the policy's own: no <retrieve> block, scored."},
    )
    retrieve_failed_groups_max_reward: float | None = field(
        default=None,
        metadata={"help": "Retrieve only in groups whose on-policy rewards are all at or below this (None: every group)."},
    )
    retrieved_token_loss_weight: float = field(
        default=0.0, metadata={"help": "w of a loss on retrieved steps' own tokens in rollouts with A > 0 (0: off)."}
    )
    retrieved_token_shaping: float | None = field(
        default=0.1, metadata={"help": "gamma of f(p) = p / (p + gamma) on retrieved tokens (None: log p)."}
    )
    retrieved_token_credit: str = field(
        default="advantage",
        metadata={"help": "Weight of a retrieved step's token loss: advantage (rows with A > 0) or stored_reward."},
    )
    advantage_baseline: str = field(
        default="group",
        metadata={"help": "Baseline: group (GRPO) or on_policy."},
    )
    tool_protocol: str = field(
        default="auto", metadata={"help": "How tools are called: tags (the paper), json (the chat template's JSON "
                                  "tool calls, as TRL), or auto."}
    )
    max_tool_calls: int = field(default=3, metadata={"help": "Tool calls executed per rollout."})
    max_turn_tokens: int = field(default=512, metadata={"help": "Most tokens sampled in one step."})
    tool_workers: int = field(default=8, metadata={"help": "Concurrent tool calls across rows."})
    json_tool_timeout: float | None = field(
        default=30.0, metadata={"help": "Seconds a JSON tool or environment call may take on its worker "
                                             "thread (None: calls run on the trainer's thread, no timeout, as TRL)."}
    )
    max_tool_result_chars: int | None = field(
        default=4000, metadata={"help": "Cut a tool's output longer than this many characters, keeping its head and "
                                        "tail (None: shown whole, as TRL)."}
    )
    answer_stop: str | None = field(
        default="</answer>", metadata={"help": "Text that ends a rollout once sampled (None: EOS only)."}
    )
    max_retrieved_tokens: int | None = field(
        default=None, metadata={"help": "Skip retrieved blocks longer than this many tokens (None: no cap)."}
    )
    retrieval_advantage_weight: float = field(default=0.2, metadata={"help": "a in A_acc * (1 + a * A_ret)."})
    retrieval_advantage_epsilon: float = field(
        default=1e-6, metadata={"help": "eps in A_ret = (Z - mean Z) / (std Z + eps); the paper's 1e-6."}
    )
    importance_shaping_weight: float = field(default=0.05, metadata={"help": "m in (1 + m * F_ret) * r."})
    step_entropy: str = field(
        default="topk", metadata={"help": "Step entropy estimator: topk (reference sum), topk_mean or full."}
    )
    step_entropy_first_tokens: int = field(
        default=20, metadata={"help": "Tokens per step for the topk estimators."}
    )
    step_entropy_top_k: int = field(default=10, metadata={"help": "Log-probs per token for the topk estimators."})
    score_retrieved_blocks: bool = field(
        default=False, metadata={"help": "Let reward functions see retrieved blocks (default: removed)."}
    )
    dynamic_sampling_max_rounds: int = field(
        default=0,
        metadata={"help": "DAPO's dynamic sampling: up to this many extra rollout rounds per step replace the prompts "
                  "of groups whose rewards are all equal (0: off)."},
    )
    signal_loss_patience: int = field(
        default=3, metadata={"help": "Steps without reward signal before one warning (0: never warn)."}
    )
    store_growth_min_reward: float | None = field(
        default=None,
        metadata={"help": "Add each group's best trajectory with at least this reward to the store (None: off)."},
    )
    store_outage_max_steps: int | None = field(
        default=None,
        metadata={"help": "Steps with the store down before the run stops; None: go on."},
    )

    def __post_init__(self):
        # Before TrainingArguments validates it: TRL's own default (bf16 unless fp16) refuses to start on a
        # CPU machine, so `RAPOConfig(output_dir=...)` would fail there as written.
        if self.bf16 is None and not self.fp16:
            precision = default_precision(trainer_device(self.use_cpu))
            self.bf16, self.fp16 = precision == "bf16", precision == "fp16"
        self._cpu_for_bf16()
        # Every numeric bound (rapo_trl/ranges.py), before GRPOConfig's own checks, which divide by num_generations
        # (0: "integer modulo by zero") and accept a negative max_completion_length that fails only once the model
        # has loaded.
        check_ranges({name: getattr(self, name) for name in RAPO_RANGES})
        if self.max_completion_length is None:
            # GRPOTrainer's generate then runs to the model's max length; RAPO's engine splits this budget between
            # the policy's turns, tool results and retrieved steps, and would fail on None at the first rollout.
            raise ValueError("max_completion_length=None is not supported: RAPO's multi-turn rollout budgets the whole "
                             "completion (sampled, tool and retrieved tokens) with it. Set a number of tokens.")
        super().__post_init__()
        if self.num_hybrid_generations is None:
            self.num_hybrid_generations = self.num_generations // 2
        if self.step_entropy not in STEP_ENTROPY_ESTIMATORS:
            raise ValueError(f"step_entropy must be one of {STEP_ENTROPY_ESTIMATORS}, got {self.step_entropy!r}.")
        if self.tool_protocol not in ("auto", "tags", "json"):
            raise ValueError(f"tool_protocol must be one of ('auto', 'tags', 'json'), got {self.tool_protocol!r}.")
        self._check_guided_retrieval()
        checked_baseline(self.advantage_baseline)
        checked_retrieved_token_credit(self.retrieved_token_credit)
        if self.advantage_baseline != DEFAULT_BASELINE and (
            self.scale_rewards != "group" or self.multi_objective_aggregation != "sum_then_normalize"
        ):
            # The other baselines normalise the weighted reward by their own rows' std: TRL's other scales and
            # per-function normalisation would be dropped without a word.
            raise ValueError(f"advantage_baseline={self.advantage_baseline!r} normalises the weighted reward itself; "
                             f"it needs scale_rewards='group' and multi_objective_aggregation='sum_then_normalize', "
                             f"got {self.scale_rewards!r} and {self.multi_objective_aggregation!r}.")
        if self.max_tool_calling_iterations is not None:
            # TRL's cap counts tool-calling turns and is unlimited by default; RAPO's engine reads max_tool_calls.
            raise ValueError(f"max_tool_calling_iterations={self.max_tool_calling_iterations} is GRPOTrainer's cap on "
                             f"tool-calling turns, which RAPO's rollout does not read: it caps tool calls with "
                             f"max_tool_calls (each call counts, default 3; now {self.max_tool_calls}). Set "
                             f"max_tool_calls instead.")
        self._refuse_generation_options_the_rollout_ignores()
        if self.retrieval_advantage_epsilon <= 0:
            raise ValueError(f"retrieval_advantage_epsilon must be > 0, got {self.retrieval_advantage_epsilon}.")
        if self.dynamic_sampling_max_rounds:
            self._require_whole_groups("dynamic sampling replaces whole groups")

    def _refuse_generation_options_the_rollout_ignores(self) -> None:
        """GRPOTrainer's generation options that RAPO's multi-turn engine cannot honour, refused before the model
        loads: each would otherwise be dropped without a word (or, for vLLM, fail only after the model and the
        engine have loaded)."""
        if self.vllm_structured_outputs_regex is not None:
            # A regex over one completion cannot constrain turns interleaved with forced tool results.
            raise ValueError("vllm_structured_outputs_regex constrains GRPOTrainer's single-turn vLLM generation; "
                             "RAPO's multi-turn rollouts (tool results and retrieved steps between the policy's "
                             "turns) never apply it. Unset it.")
        if self.use_transformers_continuous_batching:
            raise ValueError("use_transformers_continuous_batching (or use_transformers_paged) selects "
                             "GRPOTrainer's generation; RAPO's multi-turn rollouts always decode with their own "
                             "KV-cache loop (or vLLM with use_vllm=True). Unset it.")
        if self.cache_implementation is not None:
            # The loop grows one dynamic cache across turns, appending forced tool results and retrieved steps.
            raise ValueError(f"cache_implementation={self.cache_implementation!r} selects the cache of "
                             "GRPOTrainer's model.generate(); RAPO's multi-turn rollouts decode with their own KV-cache "
                             "loop, which keeps one dynamic cache across turns and never applies it. Unset it.")
        if self.use_vllm and self.vllm_mode != "colocate":
            raise ValueError(f"RAPOTrainer runs multi-turn rollouts on vLLM in colocate mode only (server mode can "
                             f"desynchronise ranks); got vllm_mode={self.vllm_mode!r}. Set vllm_mode='colocate', or "
                             f"pass RAPOTrainer(vllm_llm=...).")
        if self.use_vllm and self.vllm_tensor_parallel_size > 1:
            raise ValueError(f"RAPOTrainer's multi-turn vLLM rollouts need vllm_tensor_parallel_size=1 (each rank "
                             f"generates its own rows), got {self.vllm_tensor_parallel_size}; use data parallelism "
                             f"across GPUs instead.")

    def _require_whole_groups(self, why: str) -> None:
        """Each process's generation batch must hold whole groups (options that judge or replace a group there)."""
        rows_per_process = self.per_device_train_batch_size * (self.steps_per_generation or 1)
        if rows_per_process % self.num_generations:
            raise ValueError(
                f"{why}, so each process must generate whole groups: per_device_train_batch_size * "
                f"steps_per_generation ({rows_per_process}) must be a multiple of num_generations ({self.num_generations})."
            )

    def _cpu_for_bf16(self) -> None:
        """bf16 where the CPU is the only device: transformers refuses it unless use_cpu is set, so it is set here,
        for this machine only (``to_dict`` and pickles such as ``training_args.bin`` keep the value given)."""
        self._use_cpu_given = self.__dict__.get("_use_cpu_given", self.use_cpu)
        if self.bf16 and not self.use_cpu and trainer_device(False) == "cpu":
            self.use_cpu = True

    def to_dict(self):
        d = super().to_dict()
        d["use_cpu"] = self._use_cpu_given
        return d

    def __getstate__(self):
        # The device is chosen again where the arguments are loaded: a GPU machine must not inherit this one's CPU.
        state = dict(self.__dict__)
        state["use_cpu"] = state.pop("_use_cpu_given", state["use_cpu"])
        state.pop("_setup_devices", None)  # functools.cached_property: the device, computed again on use
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._cpu_for_bf16()

    def _check_guided_retrieval(self) -> None:
        self.retrieve_at = list(checked_boundaries(self.retrieve_at))
        if self.retrieved_step_as_own:
            check_own_step_reach(self.retrieve_at)
        if self.retrieve_failed_groups_max_reward is not None:
            if self.dynamic_sampling_max_rounds:
                # Its replacement groups would need the same two-phase rollout and a second gate per round.
                raise ValueError("retrieve_failed_groups_max_reward and dynamic_sampling_max_rounds cannot be "
                                 "combined: dynamic sampling's replacement groups are rolled out without the "
                                 "failed-group gate.")
            if self.num_hybrid_generations >= self.num_generations:
                raise ValueError(f"retrieve_failed_groups_max_reward judges a group by its on-policy rollouts: "
                                 f"num_hybrid_generations ({self.num_hybrid_generations}) must be below "
                                 f"num_generations ({self.num_generations}).")
            self._require_whole_groups("retrieve_failed_groups_max_reward judges whole groups")
        shaping = self.retrieved_token_shaping
        if shaping is not None and (isinstance(shaping, bool) or not isinstance(shaping, (int, float)) or shaping <= 0):
            raise ValueError(f"retrieved_token_shaping must be a number > 0 or None, got {shaping!r}.")

    def retrieve_prob_at(self, step: int, max_steps: int) -> float:
        """p after ``step`` of ``max_steps`` optimizer steps: constant, or decayed to ``retrieve_prob_final``."""
        return scheduled_retrieve_prob(self.retrieve_prob, self.retrieve_prob_final, step, max_steps)


RECOMMENDED_RETRIEVAL = {
    "retrieve_at": ["plan"],
    "retrieve_own_question": True,
    "retrieve_failed_groups_max_reward": 0.0,
    "retrieve_prob": 1.0,
    "retrieved_token_loss_weight": 2.0,
    "retrieved_token_shaping": None,
}
"""The package's measured best retrieval, as RAPOConfig fields (``RAPOConfig(output_dir="out",
**RECOMMENDED_RETRIEVAL)``; the defaults stay the paper's): only in groups whose on-policy rollouts all failed, every
hybrid row is shown its own question's stored first step (its plan), whose own tokens are learned by their
log-likelihood. The second half of the recipe that SFT on the store's trajectories of RL's own questions begins
(``TraceStore.sft_dataset``), as configs/demo_cpu.yaml runs it. In the learning comparison, over 5 paired seeds after
SFT on the store, it scored +0.187 fresh mean@4 over SFT-then-GRPO, per question +0.149 to +0.225
(benchmarks/results/learning_comparison.md)."""


RETRIEVAL_ONLY_OPTIONS = (
    "retrieve_prob_final", "retrieve_own_question", "retrieve_at", "retrieved_step_as_own",
    "retrieve_failed_groups_max_reward", "retrieved_token_loss_weight", "retrieved_token_shaping",
    "retrieved_token_credit", "max_retrieved_tokens", "retrieval_advantage_weight", "retrieval_advantage_epsilon",
    "importance_shaping_weight", "step_entropy", "step_entropy_first_tokens", "step_entropy_top_k",
    "score_retrieved_blocks",
)
"""RAPOConfig fields that act only through the steps hybrid rows retrieve: without retrieval no row holds one, so
each leaves training as it is (A_ret and F_ret are 0, the retrieved-token loss has no token, nothing is removed
before scoring). Not ``advantage_baseline`` (``"on_policy"`` normalises a group its own way without stored steps too)
nor the ``store_*`` fields (store growth runs without retrieval)."""


def retrieval_only_defaults() -> dict:
    """``RETRIEVAL_ONLY_OPTIONS`` at RAPOConfig's defaults."""
    fields = RAPOConfig.__dataclass_fields__
    return {name: fields[name].default_factory() if fields[name].default is MISSING else fields[name].default
            for name in RETRIEVAL_ONLY_OPTIONS}
