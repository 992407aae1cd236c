"""A rollout's row as plain data: its token ids, what produced each of them (segments) and the retrievals inserted
into it. It sits on the ground floor because both sides read it: the rollout engine writes rows, the store cuts step
records from them, the trainer turns them into loss inputs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rapo_trl.core.objective import retrieved_fraction


@dataclass
class Segment:
    """A contiguous run of completion tokens of one kind.

    ``kind`` is ``"policy"`` (sampled, loss mask 1), ``"tool"`` (forced tool result), ``"retrieved"``
    (forced retrieved step or fallback) or ``"end"`` (the forced EOS that closes a row whose answer closed, or stands
    in for a row that had no room to sample anything).
    ``start``/``end`` index into ``completion_ids``.
    """

    kind: Literal["policy", "tool", "retrieved", "end"]
    start: int
    end: int
    entropy: float | None = None


@dataclass
class RetrievalEvent:
    """One retrieval inserted into a hybrid rollout, after the policy step ``after_step``."""

    after_step: int
    """Index of the policy step it follows; -1 at the start, before the policy's first step (no ``entropy_pre``)."""
    start: int
    end: int
    is_fallback: bool
    record_id: str | None
    reward: float | None
    similarity: float | None
    entropy_pre: float | None = None
    entropy_post: float | None = None
    boundary: str = "tool_step"
    """Where it was inserted: ``"tool_step"`` (after a completed tool step), ``"plan"`` (after the first plan) or
    ``"start"`` (before the policy wrote anything)."""
    step_tokens: tuple[int, int] | None = None
    """(start, end) in ``completion_ids`` of the stored step's own text (no preface, tags or tool result); ``None``
    for the fallback text. What ``retrieved_token_loss_weight`` trains on."""
    text: str | None = None
    """The stored step as the store holds it (step and tool result), without the preface and tags; ``None`` for the
    fallback. What later queries of the row read in the block's place."""
    question_id: str | None = None
    """The question whose trajectory the stored step came from (``None`` for the fallback, or a store that does not
    say)."""
    as_own: bool = False
    """Inserted as the policy's own step (``retrieved_step_as_own``): without the preface and tags, and part of the
    trajectory the rewards score (``rewards/view.py``)."""


@dataclass
class RolloutRow:
    """A finished rollout: the exact token ids and what produced each of them."""

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    logprobs: list[float] | None = None
    segments: list[Segment] = field(default_factory=list)
    retrievals: list[RetrievalEvent] = field(default_factory=list)
    tool_calls: int = 0
    tool_failures: int = 0
    tool_errors: list[tuple[str, str]] = field(default_factory=list)
    """(tag, the line naming the error) of each failed tool call, for the trainer's warning."""
    tool_seconds: float = 0.0
    skipped_retrievals: int = 0
    """Retrievals drawn but not inserted because the block did not fit the remaining budget or the cap."""
    messages: list[dict] = field(default_factory=list)
    """With JSON tool calls: the completion as TRL's chat messages, each policy turn parsed (``parse_response``) and
    each tool result a tool message, in order; what reward functions get as the completion. Retrieved blocks are not
    in it."""
    is_hybrid: bool = False
    truncated: bool = False
    prompt_truncated: bool = False
    finished: bool = False

    @property
    def policy_steps(self) -> list[Segment]:
        return [s for s in self.segments if s.kind == "policy"]

    @property
    def retrieved_tokens(self) -> int:
        return sum(s.end - s.start for s in self.segments if s.kind == "retrieved")

    @property
    def retrieved_fraction(self) -> float:
        """F_ret (docs/design.md, Importance shaping): retrieved tokens over all completion tokens."""
        return retrieved_fraction(self.retrieved_tokens, len(self.completion_ids))
