"""The step-wise hybrid rollout (docs/design.md: Steps, Hybrid rollouts, step entropy).

Every row is a token-id sequence that only ever grows by appending ids: the policy's sampled ids
(mask 1), forced tool results and forced retrieved steps (mask 0). Text is decoded to find tool calls
and to query the store, never to rebuild the sequence.
"""

from __future__ import annotations

import inspect
import logging
import random
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from rapo_trl.core.retrieval_rule import (
    RETRIEVAL_BOUNDARIES,
    boundaries_reached,
    checked_boundaries,
    holds_plan_turn,
    is_hybrid_row,
    rows_that_retrieve,
)
from rapo_trl.core.rows import RetrievalEvent, RolloutRow, Segment
from rapo_trl.protocol import (
    PLAN_CLOSE,
    RESULT_TEMPLATE,
    RETRIEVE_PREFACE,
    RETRIEVE_TEMPLATE,
    cap_text,
    encode_retrieved_block,
)
from rapo_trl.ranges import RAPO_RANGES, check_ranges
from rapo_trl.rollout.backends.base import GenerationBackend
from rapo_trl.rollout.chat_tools import ChatToolCalls, ToolTable, tool_table
from rapo_trl.rollout.entropy import STEP_ENTROPY_ESTIMATORS, step_entropy
from rapo_trl.store.outage import StoreOutage
from rapo_trl.tools.base import Tool, ToolCall, run_tool_calls
from rapo_trl.tools.registry import tools_by_tag

logger = logging.getLogger(__name__)

__all__ = ["RETRIEVAL_BOUNDARIES", "RETRIEVE_PREFACE", "TOOL_PROTOCOLS", "HybridRolloutEngine", "RolloutConfig",
           "RolloutStats", "is_hybrid_row"]

TOOL_PROTOCOLS = ("tags", "json")
"""How the policy calls tools: the paper's inline tags, or JSON tool calls in the model's own chat template."""

class StepSelector(Protocol):
    """What the engine needs from a trace store: batched selection for many contexts at once. A store whose
    ``select`` also takes ``question_ids`` (one per context, ``None`` for none) may prefer each row's own
    question's records (``RolloutConfig.retrieve_own_question``)."""

    def select(self, contexts: list[str]) -> list[Any]: ...


def select_takes(store, name: str) -> bool:
    """Whether ``store.select`` accepts the keyword ``name`` (``TraceStore`` takes ``question_ids``, ``top_k``,
    ``min_reward`` and ``fallback_text``; a custom store may take none)."""
    try:
        return name in inspect.signature(store.select).parameters
    except (TypeError, ValueError):  # no signature to read (a builtin, a C extension)
        return False


def takes_question_ids(store) -> bool:
    """Whether ``store.select`` accepts a ``question_ids`` argument (``TraceStore`` does; a custom store may not)."""
    return select_takes(store, "question_ids")


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
    """Probability p of retrieving after each completed tool step of a hybrid rollout."""
    step_entropy: str = "topk"
    """Step entropy estimator: ``"topk"`` (reference code's sum), ``"topk_mean"`` or ``"full"`` (paper)."""
    step_entropy_first_tokens: int = 20
    """Tokens per step the ``"topk"`` estimator averages over."""
    result_template: str = RESULT_TEMPLATE
    """How a tool's output is shown to the policy (forced tokens)."""
    retrieve_template: str = RETRIEVE_TEMPLATE
    """How a retrieved step (or the fallback text) is inserted (forced tokens)."""
    tool_limit_message: str = "Tool-call limit reached; answer with what you have."
    """Shown instead of a result once ``max_tool_calls`` calls have run."""
    max_result_chars: int = 4000
    """Tool output longer than this is cut (keeping its head and tail) before tokenisation."""
    tool_workers: int = 8
    """Tool calls that run concurrently across rows."""
    answer_stop: str | None = "</answer>"
    """A turn that closes the final answer ends the rollout there (``None``: only EOS ends it)."""
    max_retrieved_tokens: int | None = None
    """Retrieved blocks longer than this many tokens are skipped, not cut (``None``: no cap)."""
    retrieve_at: tuple[str, ...] = ("tool_step",)
    """Step boundaries of a hybrid rollout where a retrieval is drawn (``RETRIEVAL_BOUNDARIES``, the retrieval rule:
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
    """With ``"json"``: the template tool results are rendered with (``None``: the tokenizer's own)."""
    chat_template_kwargs: dict = field(default_factory=dict)
    """With ``"json"``: extra ``apply_chat_template`` arguments for rendering tool results."""

    def __post_init__(self):
        self.retrieve_at = checked_boundaries(self.retrieve_at)
        if self.tool_protocol not in TOOL_PROTOCOLS:
            raise ValueError(f"tool_protocol must be one of {TOOL_PROTOCOLS}, got {self.tool_protocol!r}.")
        if self.tool_protocol == "json" and set(self.retrieve_at) != {"tool_step"}:
            raise ValueError("With JSON tool calls a hybrid rollout retrieves after tool steps only: "
                             f"retrieve_at must be ['tool_step'], got {list(self.retrieve_at)}.")
        # The table RAPOConfig checks too.
        check_ranges({name: getattr(self, name) for name in RAPO_RANGES if hasattr(self, name)})
        if self.step_entropy not in STEP_ENTROPY_ESTIMATORS:
            raise ValueError(f"step_entropy must be one of {STEP_ENTROPY_ESTIMATORS}, got {self.step_entropy!r}.")
        if self.max_result_chars < 1:
            raise ValueError(f"max_result_chars must be positive, got {self.max_result_chars}.")


@dataclass
class RolloutStats:
    """Timings and counts of one rollout (for metrics and benchmarks)."""

    generate_seconds: float = 0.0
    tool_seconds: float = 0.0
    retrieval_seconds: float = 0.0
    turns: int = 0
    extra: dict = field(default_factory=dict)


@dataclass
class Rollout:
    """What ``HybridRolloutEngine.roll_out`` returns: the rows, and how the rollout spent its time."""

    rows: list[RolloutRow]
    stats: RolloutStats



def extract_tool_call(text: str, stop_string: str) -> tuple[str, str | None]:
    """``(tag, content)`` of the call a turn ended with; content ``None`` when it has no opening tag."""
    tag = stop_string[2:-1]
    end = text.rfind(stop_string)
    start = text.rfind(f"<{tag}>", 0, end)
    if start < 0:
        return tag, None
    return tag, text[start + len(tag) + 2 : end]


class HybridRolloutEngine:
    """Runs step-wise hybrid rollouts for a batch of rows.

    Args:
        tokenizer: the policy's tokenizer.
        backend: a generation backend (``TransformersBackend`` or ``VLLMBackend``).
        tools: tag tools, or plain typed functions (wrapped as ``FunctionTool``); their closing tags are
            the turn's stop strings. With ``config.tool_protocol="json"``: plain functions the policy calls in its
            chat template's JSON format (every row's, unless ``roll_out`` gets ``row_tools``).
        store: anything with ``select(contexts) -> list[Retrieved]`` (e.g. ``TraceStore``); ``None``
            disables retrieval.
        config: budgets and RAPO knobs.
        seed: seeds the retrieval draws (the policy's sampling follows torch's RNG).
    """

    def __init__(
        self,
        tokenizer,
        backend: GenerationBackend,
        tools: Sequence[Tool | Callable] = (),
        store: StepSelector | None = None,
        config: RolloutConfig | None = None,
        seed: int | None = None,
    ):
        self.tokenizer = tokenizer
        self.backend = backend
        self.store = store
        self.config = config or RolloutConfig()
        self.chat_tools: ChatToolCalls | None = None
        """The JSON tool protocol (``None``: tags)."""
        self.json_tools: dict = {}
        """With JSON tool calls: the functions every row may call, by name."""
        if self.config.tool_protocol == "json":
            self.tools = {}
            self.json_tools = tool_table(tools)
            self.chat_tools = ChatToolCalls(tokenizer, self.config.chat_template, self.config.chat_template_kwargs)
        else:
            self.tools = tools_by_tag(tools)
        self.rng = random.Random(seed)
        self.store_outage = StoreOutage()
        """The store's health as rollouts found it: retries, one warning per outage, rows given up."""
        self._warned_long_prompt = False
        self._warned_question_ids = False

    @property
    def store_errors(self) -> int:
        """Retrievals (one per row) given up because the store failed (cumulative; logged as ``rapo/store_errors``)."""
        return self.store_outage.given_up

    @property
    def stop_strings(self) -> list[str]:
        if self.chat_tools is not None:  # a JSON turn ends at the template's end-of-turn token only, as in TRL
            return []
        stops = [f"</{tag}>" for tag in self.tools]
        return stops + [self.config.answer_stop] if self.config.answer_stop else stops

    def encode(self, text: str) -> list[int]:
        # A lone surrogate in a tool's or the store's text cannot be tokenised: it becomes "?".
        text = text.encode("utf-8", "replace").decode("utf-8")
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _prepare_prompt(self, ids: list[int]) -> tuple[list[int], bool]:
        limit = self.config.max_prompt_length
        if limit is None or len(ids) <= limit:
            return list(ids), False
        if not self._warned_long_prompt:
            logger.warning(
                "A prompt has %d tokens, more than max_prompt_length=%d: keeping its last %d tokens. "
                "Raise max_prompt_length or shorten the prompts.", len(ids), limit, limit,
            )
            self._warned_long_prompt = True
        return list(ids[-limit:]), True

    def run(self, *args, **kwargs) -> list[RolloutRow]:
        """The rows of ``roll_out`` (same arguments), its stats dropped."""
        return self.roll_out(*args, **kwargs).rows

    def roll_out(
        self,
        prompt_ids: Sequence[Sequence[int]],
        query_prefixes: Sequence[str] | None = None,
        hybrid: Sequence[bool] | None = None,
        retrieval_enabled: bool = True,
        question_ids: Sequence[str | None] | None = None,
        retrieve_prob: float | None = None,
        row_tools: Sequence[ToolTable] | None = None,
    ) -> Rollout:
        """Roll out every row to completion.

        ``query_prefixes`` is each row's retrieval context before its completion (usually the question
        without the system prompt); ``hybrid`` marks the rows that may retrieve; ``question_ids`` names each row's
        question (``None``: unknown), which ``retrieve_own_question`` restricts its retrievals to;
        ``retrieve_prob`` is p for this rollout (``None``: the config's), e.g. a trainer's scheduled value;
        ``row_tools`` (JSON tool calls only) is each row's own ``{name: function}`` table, e.g. its environment's
        methods (``None``: the engine's tools for every row).
        """
        cfg = self.config
        if retrieve_prob is None:
            retrieve_prob = cfg.retrieve_prob
        if not 0.0 <= retrieve_prob <= 1.0:
            raise ValueError(f"retrieve_prob must be in [0, 1], got {retrieve_prob}.")
        stats = RolloutStats()
        rows = []
        for i, ids in enumerate(prompt_ids):
            prepared, cut = self._prepare_prompt(list(ids))
            rows.append(RolloutRow(prompt_ids=prepared, prompt_truncated=cut, is_hybrid=bool(hybrid and hybrid[i])))
        prefixes = list(query_prefixes) if query_prefixes is not None else [""] * len(rows)
        if question_ids is not None and len(question_ids) != len(rows):
            raise ValueError(f"run() got {len(question_ids)} question ids for {len(rows)} rows.")
        own = list(question_ids) if question_ids is not None and cfg.retrieve_own_question else [None] * len(rows)
        if row_tools is not None and len(row_tools) != len(rows):
            raise ValueError(f"run() got {len(row_tools)} tool tables for {len(rows)} rows.")
        tables = list(row_tools) if row_tools is not None else [self.json_tools] * len(rows)
        can_retrieve = retrieval_enabled and self.store is not None and retrieve_prob > 0
        # The plan boundary is the first turn's: hybrid rows (and, sharing the call, the others) stop at the plan's
        # end too. A row that does not retrieve there goes on as if it had not stopped: same turn budget, same
        # policy step (``carried``), so on-policy rows are the rows they would be without the plan boundary.
        plan_turn = holds_plan_turn(can_retrieve, cfg.retrieve_at, (row.is_hybrid for row in rows))
        carried: dict[int, _HeldTurn] = {}  # row -> the part of its turn sampled before the plan stop

        # Backends that keep per-row state between turns (the transformers KV cache) may do so for this
        # rollout only: the weights do not change until it ends.
        getattr(self.backend, "begin_rollout", lambda: None)()
        active = list(range(len(rows)))
        while active:
            stats.turns += 1
            budgets = [min(cfg.max_turn_tokens - (carried[i].sampled if i in carried else 0),
                           cfg.max_completion_length - len(rows[i].completion_ids)) for i in active]
            stops = self.stop_strings + ([cfg.plan_stop] if plan_turn and stats.turns == 1 else [])
            start = time.perf_counter()
            outputs = self.backend.generate(
                [rows[i].prompt_ids + rows[i].completion_ids for i in active], budgets, stops
            )
            stats.generate_seconds += time.perf_counter() - start

            calls: list[tuple[int, str, str | None]] = []  # (row, tag, content)
            planned: list[int] = []  # rows that closed their plan this turn
            for i, out in zip(active, outputs):
                row = rows[i]
                step_start = len(row.completion_ids)
                row.completion_ids.extend(out.token_ids)
                row.env_mask.extend([1] * len(out.token_ids))
                if out.logprobs is not None:
                    row.logprobs = (row.logprobs or [0.0] * step_start) + list(out.logprobs)
                elif row.logprobs is not None:
                    row.logprobs.extend([0.0] * len(out.token_ids))
                turn = carried.pop(i, _HeldTurn()).extended(out)
                entropy = step_entropy(turn.entropy_full, turn.entropy_topk, cfg.step_entropy,
                                       cfg.step_entropy_first_tokens)
                if turn.sampled > len(out.token_ids):  # the rest of a step cut at the plan: one step, not two
                    step = row.segments[-1]
                    step.end, step.entropy = len(row.completion_ids), entropy
                    step_start = step.start
                else:
                    row.segments.append(Segment("policy", step_start, len(row.completion_ids), entropy))
                    self._fill_post_entropy(row)
                calls_made = self._json_turn(row, step_start, tables[i]) if self.chat_tools is not None else None
                if calls_made and out.finish == "eos":
                    calls.append((i, "json", calls_made))
                elif out.finish == "eos":
                    row.finished = True
                elif out.finish == "stop" and out.stop_string == cfg.answer_stop:
                    row.finished = True
                    self._close_episode(row)
                elif out.finish == "length" or len(row.completion_ids) >= cfg.max_completion_length:
                    row.truncated = True
                elif plan_turn and stats.turns == 1 and out.stop_string == cfg.plan_stop:
                    planned.append(i)
                    carried[i] = turn
                else:
                    text = self.tokenizer.decode(row.completion_ids[step_start:], skip_special_tokens=False)
                    tag, content = extract_tool_call(text, out.stop_string)
                    calls.append((i, tag, content))

            start = time.perf_counter()
            if self.chat_tools is not None:
                limited = self._run_json_calls(rows, calls, tables)
                # A row whose results did not fit ended with its call turn, as in TRL: no step to retrieve after.
                calls = [call for call in calls if not rows[call[0]].finished]
            else:
                limited = self._run_tools(rows, calls)
            # A turn whose every call was past max_tool_calls ran no tool: the limit notice is no tool step, and a
            # retrieval after it would hand the row a later stored step at each such turn.
            calls = [call for call in calls if call[0] not in limited]
            stats.tool_seconds += time.perf_counter() - start

            if can_retrieve:
                boundaries = boundaries_reached(planned, (i for i, _, _ in calls), cfg.retrieve_at)
                start = time.perf_counter()
                self._retrieve(rows, boundaries, prefixes, own, retrieve_prob)
                stats.retrieval_seconds += time.perf_counter() - start
            for i in planned:
                if rows[i].segments[-1].kind != "policy":  # it retrieved: the plan was a step of its own
                    del carried[i]
                elif carried[i].sampled >= cfg.max_turn_tokens:  # no budget left: cut, as one long turn would be
                    rows[i].truncated = True

            active = [i for i in active if not rows[i].finished and not rows[i].truncated]
        getattr(self.backend, "end_rollout", lambda: None)()

        for row in rows:
            if not row.completion_ids:  # TRL indexes completions[-1]; never return an empty one
                eos = self.tokenizer.eos_token_id
                row.completion_ids, row.env_mask = [eos], [1]
                row.segments.append(Segment("policy", 0, 1, None))
                if row.logprobs is not None:
                    row.logprobs = [0.0]
        return Rollout(rows, stats)

    def _append_forced(self, row: RolloutRow, ids: list[int], kind: str) -> tuple[int, int]:
        room = self.config.max_completion_length - len(row.completion_ids)
        if len(ids) > room:
            ids = ids[:room]
            row.truncated = True
        start = len(row.completion_ids)
        row.completion_ids.extend(ids)
        row.env_mask.extend([0] * len(ids))
        if row.logprobs is not None:
            row.logprobs.extend([0.0] * len(ids))
        if ids:
            row.segments.append(Segment(kind, start, len(row.completion_ids)))
        if len(row.completion_ids) >= self.config.max_completion_length:
            row.truncated = True
        return start, len(row.completion_ids)

    def _close_episode(self, row: RolloutRow) -> None:
        """End a row whose answer closed with a forced EOS (mask 0), so TRL counts it as terminated, not clipped
        (``completions/clipped_ratio``, ``mask_truncated_completions``). Skipped when the budget is spent."""
        eos = self.tokenizer.eos_token_id
        if eos is not None and len(row.completion_ids) < self.config.max_completion_length:
            self._append_forced(row, [eos], "end")
            row.truncated = False  # an EOS in the last slot still ends a finished row, not a cut one

    def _run_tools(self, rows: list[RolloutRow], calls: list[tuple[int, str, str | None]]) -> set[int]:
        """Run the rows' tag calls and append their results; returns the rows whose call was past ``max_tool_calls``
        (shown the limit notice, no tool run)."""
        cfg = self.config
        outputs: dict[int, ToolCall | str] = {}
        to_run: list[tuple[int, Tool, str]] = []
        limited = set()
        for i, tag, content in calls:
            row = rows[i]
            if row.tool_calls >= cfg.max_tool_calls:
                outputs[i] = cfg.tool_limit_message
                limited.add(i)
                continue
            row.tool_calls += 1
            if content is None:
                outputs[i] = ToolCall(tag, "", f"Error: </{tag}> without an opening <{tag}> tag.", False, 0.0)
            elif not content.strip():
                outputs[i] = ToolCall(tag, content, f"Error: empty <{tag}> call.", False, 0.0)
            else:
                to_run.append((i, self.tools[tag], content))
        for (i, _, _), result in zip(to_run, run_tool_calls([(t, c) for _, t, c in to_run], cfg.tool_workers)):
            outputs[i] = result
        for i, _, _ in calls:
            result = outputs[i]
            if isinstance(result, ToolCall):
                rows[i].tool_failures += int(not result.ok)
                if not result.ok:
                    rows[i].tool_errors.append((result.tag, _error_line(result.output)))
                rows[i].tool_seconds += result.seconds
                text = result.output
            else:
                text = result
            block = cfg.result_template.format(output=cap_text(text, cfg.max_result_chars))
            self._append_forced(rows[i], self.encode(block), "tool")
        return limited

    def _json_turn(self, row: RolloutRow, step_start: int, tools: ToolTable) -> list[dict]:
        """Parse the policy turn just sampled into the row's chat messages; the tool calls it makes (none when it
        makes none, or they do not parse: TRL then reads the turn as plain text)."""
        turn = row.completion_ids[step_start:]
        if not turn:
            return []
        # The parser reads the message from the last assistant header of prefix + turn: a retrieved block just before
        # the turn stays out of the prefix, so it is never read as the policy's words (or its calls).
        header = step_start
        for segment in reversed(row.segments[:-1]):
            if segment.kind != "retrieved" or segment.end != header:
                break
            header = segment.start
        message = self.chat_tools.parse(turn, row.prompt_ids + row.completion_ids[:header], tools)
        row.messages.append(message)
        return message.get("tool_calls") or []

    def _run_json_calls(self, rows: list[RolloutRow], calls: list[tuple[int, str, list[dict]]],
                        tables: list[ToolTable]) -> set[int]:
        """Run each row's JSON calls (a row's in order, rows side by side) and append their results as the chat
        template renders them; results that do not fit the completion budget end the row instead, as in TRL. Returns
        the rows whose every call was past ``max_tool_calls``."""
        cfg = self.config
        limited = {i for i, _, _ in calls if rows[i].tool_calls >= cfg.max_tool_calls}
        with ThreadPoolExecutor(max_workers=max(1, min(cfg.tool_workers, len(calls) or 1))) as pool:
            shown = list(pool.map(lambda call: self.chat_tools.results_for(rows[call[0]], call[2], tables[call[0]], cfg),
                                  calls))
        for (i, _, _), messages in zip(calls, shown):
            row = rows[i]
            suffix = self.chat_tools.suffix_ids(messages)
            if len(row.completion_ids) + len(suffix) > cfg.max_completion_length:
                row.finished = True
                continue
            self._append_forced(row, suffix, "tool")
            row.messages.extend(messages)
        return limited

    def _retrieve(self, rows: list[RolloutRow], boundaries: dict[int, str], prefixes: list[str],
                  question_ids: list[str | None], retrieve_prob: float) -> None:
        """Draw a retrieval for each hybrid row at a step boundary (``boundaries``: row -> which boundary); a row with
        a question id asks for its own question's records (``retrieve_own_question``)."""
        cfg = self.config
        chosen = rows_that_retrieve(boundaries, rows, self.rng, retrieve_prob)
        if not chosen:
            return
        # A plan retrieval asks for the row's first step: stored first steps are keyed by the context before them
        # (the question), so it queries with that. With the plan in the query, the nearest keys are those of
        # second steps (question + first step), i.e. another question's answer step.
        contexts = [prefixes[i] if boundaries[i] == "plan" else prefixes[i] + self._context_text(rows[i])
                    for i in chosen]
        # A failing store (server down, timeout) is retried with backoff, then these rows go on without retrieval
        # (counted per row as rapo/store_errors); during an outage one try each, and one warning in all.
        own = [question_ids[i] for i in chosen]
        selected = self.store_outage.select(self.store, contexts, question_ids=own if any(q is not None for q in own)
                                            and self._takes_question_ids() else None)
        if selected is None:
            return
        for i, found in zip(chosen, selected):
            row = rows[i]
            ids, step_span = encode_retrieved_block(self.tokenizer, found.text, cfg.retrieve_template,
                                                    cfg.result_template)
            # Never cut a retrieved step or end a row because of one (docs/design.md): a block that does not
            # leave the policy room to continue, or exceeds the cap, is skipped and counted.
            room = cfg.max_completion_length - len(row.completion_ids)
            if len(ids) >= room or (cfg.max_retrieved_tokens is not None and len(ids) > cfg.max_retrieved_tokens):
                row.skipped_retrievals += 1
                continue
            start, end = self._append_forced(row, ids, "retrieved")
            is_fallback = bool(getattr(found, "is_fallback", False))
            learnable = None if is_fallback or step_span is None else (start + step_span[0], start + step_span[1])
            row.retrievals.append(
                RetrievalEvent(
                    after_step=len(row.policy_steps) - 1,
                    start=start,
                    end=end,
                    is_fallback=is_fallback,
                    record_id=getattr(found, "record_id", None),
                    reward=getattr(found, "reward", None),
                    similarity=getattr(found, "similarity", None),
                    entropy_pre=row.policy_steps[-1].entropy,
                    boundary=boundaries[i],
                    step_tokens=learnable,
                    text=None if is_fallback else found.text,
                    question_id=getattr(found, "question_id", None),
                )
            )

    def _takes_question_ids(self) -> bool:
        if not takes_question_ids(self.store):
            if not self._warned_question_ids:
                logger.warning("retrieve_own_question: %s.select takes no question_ids; retrieving by similarity "
                               "alone.", type(self.store).__name__)
                self._warned_question_ids = True
            return False
        return True

    def _context_text(self, row: RolloutRow) -> str:
        """The row's completion as a store key reads: an earlier retrieved block stands as the stored step's own text
        (a key is an agent's context, which never holds the preface or ``<retrieve>`` tags); a fallback, as nothing."""
        parts, at = [], 0
        for event in row.retrievals:
            parts += [self.tokenizer.decode(row.completion_ids[at:event.start], skip_special_tokens=True),
                      event.text or ""]
            at = event.end
        parts.append(self.tokenizer.decode(row.completion_ids[at:], skip_special_tokens=True))
        return "".join(parts)

    @staticmethod
    def _fill_post_entropy(row: RolloutRow) -> None:
        """The step just sampled is the 'post' step of any retrieval still waiting for one."""
        steps = row.policy_steps
        for event in row.retrievals:
            if event.entropy_post is None and event.after_step == len(steps) - 2:
                event.entropy_post = steps[-1].entropy

    def get_state(self) -> dict:
        """RNG state for checkpoints."""
        return {"rng": self.rng.getstate()}

    def set_state(self, state: dict) -> None:
        self.rng.setstate(_as_tuple(state["rng"]))


@dataclass
class _HeldTurn:
    """The tokens of a policy turn sampled so far, counted, with their entropies (a turn may span a plan stop)."""

    sampled: int = 0
    entropy_full: list[float] = field(default_factory=list)
    entropy_topk: list[float] = field(default_factory=list)

    def extended(self, out) -> _HeldTurn:
        return _HeldTurn(self.sampled + len(out.token_ids), self.entropy_full + list(out.entropy_full),
                         self.entropy_topk + list(out.entropy_topk))


def _as_tuple(value):
    """JSON turns the RNG state's tuples into lists; ``random.setstate`` needs tuples back."""
    if isinstance(value, list):
        return tuple(_as_tuple(v) for v in value)
    return value


def _error_line(output: str) -> str:
    """The line of a failed call's output that names the error: a traceback's last line, not its header."""
    lines = [line.strip() for line in output.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""
