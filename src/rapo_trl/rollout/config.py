"""The rollout engine's settings: budgets, templates, the tool protocol and where hybrid rows retrieve."""

from __future__ import annotations

from dataclasses import dataclass, field

from rapo_trl.core.retrieval_rule import check_json_tools_reach, check_own_step_reach, checked_boundaries
from rapo_trl.protocol import PLAN_CLOSE, RESULT_TEMPLATE, RETRIEVE_TEMPLATE
from rapo_trl.ranges import RAPO_RANGES, check_ranges
from rapo_trl.rollout.entropy import STEP_ENTROPY_ESTIMATORS
from rapo_trl.tools.timed_call import DEFAULT_TIMEOUT_S

TOOL_PROTOCOLS = ("tags", "json")
"""How the policy calls tools: the paper's inline tags, or JSON tool calls in the model's own chat template."""


@dataclass
class RolloutConfig:
    """Budgets and RAPO knobs of one batch of rollouts. Which rows are hybrid (may retrieve) is the caller's to say,
    row by row (``roll_out``'s ``hybrid``); the engine knows no group size."""

    max_completion_length: int = 1024
    """Total completion budget in tokens, forced tool and retrieved tokens included."""
    max_turn_tokens: int = 512
    """Most tokens the policy may sample in one step; a step that reaches it ends the rollout (truncated)."""
    max_prompt_length: int | None = None
    """Prompts longer than this keep their last tokens (with a warning); ``None`` keeps them whole."""
    max_tool_calls: int = 3
    """Tool calls executed per rollout; later calls get a notice instead of a result."""
    retrieve_prob: float = 0.5
    """Probability p of retrieving at each boundary of ``retrieve_at`` a hybrid rollout reaches."""
    step_entropy: str = "topk"
    """Step entropy estimator: ``"topk"`` (reference code's sum), ``"topk_mean"`` or ``"full"`` (paper)."""
    step_entropy_first_tokens: int = 20
    """Tokens per step the ``"topk"`` estimator averages over."""
    result_template: str = RESULT_TEMPLATE
    """How a tool's output is shown to the policy (forced tokens)."""
    retrieve_template: str = RETRIEVE_TEMPLATE
    """How a retrieved step (or the fallback text) is inserted (forced tokens)."""
    retrieved_step_as_own: bool = False
    """Insert a stored step as the policy's own step (``protocol.OWN_STEP_TEMPLATE``: no preface, no tags) instead of
    with ``retrieve_template``; the fallback text, which is no step, keeps ``retrieve_template``."""
    tool_limit_message: str = "Tool-call limit reached; answer with what you have."
    """Shown instead of a result once ``max_tool_calls`` calls have run."""
    max_result_chars: int | None = 4000
    """Tool output longer than this is cut (keeping its head and tail) before tokenisation; ``None``: never cut."""
    tool_workers: int = 8
    """Tool calls that run concurrently across rows."""
    json_tool_timeout: float | None = DEFAULT_TIMEOUT_S
    """Seconds a JSON tool or environment call may take on its worker thread; ``None``: a batch's calls run one after
    another on the calling thread with no timeout, as TRL runs them (``rapo_trl.tools.timed_call.call_here``)."""
    answer_stop: str | None = "</answer>"
    """A turn that closes the final answer ends the rollout there (``None``: only EOS ends it)."""
    max_retrieved_tokens: int | None = None
    """Retrieved blocks longer than this many tokens are skipped, not cut (``None``: no cap)."""
    retrieve_at: tuple[str, ...] = ("tool_step",)
    """Where a hybrid rollout draws a retrieval: names of ``RETRIEVAL_TRIGGERS`` (the retrieval rule:
    ``rapo_trl.core.retrieval_rule``)."""
    plan_stop: str = PLAN_CLOSE
    """Closing text of the policy's plan: with ``"plan"`` in ``retrieve_at`` the first turn also stops there."""
    retrieve_own_question: bool = False
    """Ask the store for the row's own question's records (``run``'s ``question_ids``) where it has any, instead of
    the nearest records of any question; only a store whose ``select`` takes ``question_ids`` can."""
    tool_protocol: str = "tags"
    """``"tags"``: the policy writes ``<tag>...</tag>`` inline and turns stop at closing tags (the paper); ``"json"``:
    JSON tool calls in the model's own chat template, a turn ending at its end-of-turn token (TRL's ``tools=`` and
    ``environment_factory``; ``rollout/chat_tools.py``)."""
    chat_template: str | None = None
    """With ``"json"``: the template tool results are rendered with (``None``: the tokenizer's own; an
    `EnvironmentAgent` takes the one GRPOTrainer given tools renders with, ``chat_tools.training_chat_template``)."""
    chat_template_kwargs: dict = field(default_factory=dict)
    """With ``"json"``: extra ``apply_chat_template`` arguments for rendering tool results (and an
    `EnvironmentAgent`'s prompts)."""

    def __post_init__(self):
        self.retrieve_at = checked_boundaries(self.retrieve_at)
        if self.tool_protocol not in TOOL_PROTOCOLS:
            raise ValueError(f"tool_protocol must be one of {TOOL_PROTOCOLS}, got {self.tool_protocol!r}.")
        if self.tool_protocol == "json":
            check_json_tools_reach(self.retrieve_at)
            if self.retrieved_step_as_own:
                raise ValueError("retrieved_step_as_own inserts a stored step as tagged text of the policy's own: "
                                 "it needs tool_protocol 'tags', not JSON tool calls.")
        if self.retrieved_step_as_own:
            check_own_step_reach(self.retrieve_at)
        # The table RAPOConfig checks too.
        check_ranges({name: getattr(self, name) for name in RAPO_RANGES if hasattr(self, name)})
        if self.step_entropy not in STEP_ENTROPY_ESTIMATORS:
            raise ValueError(f"step_entropy must be one of {STEP_ENTROPY_ESTIMATORS}, got {self.step_entropy!r}.")
        if self.max_result_chars is not None and self.max_result_chars < 1:
            raise ValueError(f"max_result_chars must be positive, got {self.max_result_chars}.")
