"""The step-wise hybrid rollout's turn loop (docs/design.md: Steps, Hybrid rollouts, step entropy).

Before the first turn, with ``retrieve_at: start``, a hybrid row may begin with a stored first step. Each turn:
generate for every active row until a tool's closing tag (with JSON tools, the end of the turn), the answer or the
budget; run the turn's tool calls and append their results; at the boundaries the retrieval rule names, let hybrid
rows retrieve a stored step; go on until every row has finished or run out of budget.

Every row is a token-id sequence that only ever grows by appending ids (``rollout/sequence.py``): the policy's
sampled ids (mask 1), forced tool results (``rollout/tool_turns.py``) and forced retrieved steps
(``rollout/retrieval.py``), mask 0. Text is decoded to find tool calls and to query the store, never to rebuild
the sequence.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rapo_trl.core.retrieval_rule import (
    RETRIEVAL_BOUNDARIES,
    boundaries_at_start,
    boundaries_reached,
    holds_plan_turn,
    is_hybrid_row,
)
from rapo_trl.core.rows import RolloutRow
from rapo_trl.protocol import RETRIEVE_PREFACE
from rapo_trl.rollout.backends.base import GenerationBackend
from rapo_trl.rollout.chat_tools import ChatToolCalls, ToolTable, tool_table
from rapo_trl.rollout.config import TOOL_PROTOCOLS, RolloutConfig
from rapo_trl.rollout.retrieval import StepRetrieval, StepSelector, select_takes, takes_question_ids
from rapo_trl.rollout.sequence import HeldTurn, append_policy_step, close_episode, never_empty
from rapo_trl.rollout.tool_turns import (
    TurnCall,
    extract_tool_call,
    parse_json_turn,
    run_json_calls,
    run_tag_calls,
)
from rapo_trl.rollout.types import TurnOutput
from rapo_trl.store.outage import StoreOutage
from rapo_trl.tools.base import Tool
from rapo_trl.tools.registry import tools_by_tag

logger = logging.getLogger(__name__)

__all__ = ["RETRIEVAL_BOUNDARIES", "RETRIEVE_PREFACE", "TOOL_PROTOCOLS", "HybridRolloutEngine", "Rollout",
           "RolloutConfig", "RolloutStats", "StepSelector", "extract_tool_call", "is_hybrid_row", "select_takes",
           "takes_question_ids"]

PLAN_CLOSED = "plan"
"""How a turn held at the plan's end ended (``HybridRolloutEngine._turn_end``)."""
ENDED = "ended"
"""How a turn that finished or truncated its row ended."""


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
        self.config = config or RolloutConfig()
        self.chat_tools: ChatToolCalls | None = None
        """The JSON tool protocol (``None``: tags)."""
        self.json_tools: dict = {}
        """With JSON tool calls: the functions every row may call, by name."""
        if self.config.tool_protocol == "json":
            self.tools = {}
            self.json_tools = tool_table(tools)
            self.chat_tools = ChatToolCalls(tokenizer, self.config.chat_template, self.config.chat_template_kwargs,
                                            self.config.json_tool_timeout)
        else:
            self.tools = tools_by_tag(tools)
        self.retrieval = StepRetrieval(store, tokenizer, self.config, seed)
        """The store, the seeded draws and the store's health (``rollout/retrieval.py``)."""
        self._warned_long_prompt = False

    @property
    def store(self) -> StepSelector | None:
        return self.retrieval.store

    @property
    def rng(self):
        """The generator every retrieval draw comes from."""
        return self.retrieval.rng

    @property
    def store_outage(self) -> StoreOutage:
        """The store's health as rollouts found it: retries, one warning per outage, rows given up."""
        return self.retrieval.outage

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
        # A special token's text in a tool's output (an end-of-turn marker in a search hit) stays text, as in a
        # retrieved block: an EOS id there would end the turn in the model's eyes, and TRL, reading a row's last id,
        # would count a row the budget cut right after it as terminated.
        return self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]

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
        retrieve_prob = self._checked_prob(retrieve_prob)
        rows = [self._new_row(ids, bool(hybrid and hybrid[i])) for i, ids in enumerate(prompt_ids)]
        prefixes = list(query_prefixes) if query_prefixes is not None else [""] * len(rows)
        own = self._own_question_ids(question_ids, len(rows))
        tables = self._tool_tables(row_tools, len(rows))
        can_retrieve = retrieval_enabled and self.store is not None and retrieve_prob > 0
        # The plan boundary is the first turn's: hybrid rows (and, sharing the call, the others) stop at the plan's
        # end too. A row that does not retrieve there goes on as if it had not stopped: same turn budget, same
        # policy step (``carried``), so on-policy rows are the rows they would be without the plan boundary.
        plan_turn = holds_plan_turn(can_retrieve, cfg.retrieve_at, (row.is_hybrid for row in rows))
        carried: dict[int, HeldTurn] = {}  # row -> the part of its turn sampled before the plan stop
        tool_steps: Counter[int] = Counter()  # row -> the tool steps it has completed
        stats = RolloutStats()

        if can_retrieve:  # before the policy writes anything: a hybrid row may begin with a stored first step
            self._retrieve(rows, boundaries_at_start(len(rows), cfg.retrieve_at), prefixes, own, retrieve_prob, stats)
        # Backends that keep per-row state between turns (the transformers KV cache) may do so for this
        # rollout only: the weights do not change until it ends.
        getattr(self.backend, "begin_rollout", lambda: None)()
        active = [i for i, row in enumerate(rows) if not row.finished and not row.truncated]
        while active:
            stats.turns += 1
            at_plan = plan_turn and stats.turns == 1
            outputs = self._generate(rows, active, carried, at_plan, stats)
            calls: list[TurnCall] = []
            planned: list[int] = []  # rows that closed their plan this turn
            for i, out in zip(active, outputs):
                turn = carried.pop(i, HeldTurn()).extended(out)
                step_start = append_policy_step(rows[i], out, turn, cfg.step_entropy, cfg.step_entropy_first_tokens)
                ending = self._turn_end(rows[i], out, step_start, tables[i], at_plan)
                if ending == PLAN_CLOSED:
                    planned.append(i)
                    carried[i] = turn
                elif ending != ENDED:
                    calls.append((i, *ending))
            stepped = self._run_tool_calls(rows, calls, tables, stats)
            tool_steps.update(stepped)
            if can_retrieve:
                reached = boundaries_reached(planned, {i: tool_steps[i] for i in stepped}, cfg.retrieve_at)
                self._retrieve(rows, reached, prefixes, own, retrieve_prob, stats)
            self._settle_plan_rows(rows, planned, carried)
            active = [i for i in active if not rows[i].finished and not rows[i].truncated]
        getattr(self.backend, "end_rollout", lambda: None)()
        for row in rows:
            never_empty(row, self.tokenizer.eos_token_id)
        return Rollout(rows, stats)

    def _checked_prob(self, retrieve_prob: float | None) -> float:
        """p for this rollout: the one given, else the config's."""
        if retrieve_prob is None:
            retrieve_prob = self.config.retrieve_prob
        if not 0.0 <= retrieve_prob <= 1.0:
            raise ValueError(f"retrieve_prob must be in [0, 1], got {retrieve_prob}.")
        return retrieve_prob

    def _new_row(self, prompt_ids: Sequence[int], is_hybrid: bool) -> RolloutRow:
        """A row with no completion yet; a prompt past ``max_prompt_length`` keeps its last tokens (one warning)."""
        ids, limit = list(prompt_ids), self.config.max_prompt_length
        if limit is None or len(ids) <= limit:
            return RolloutRow(prompt_ids=ids, is_hybrid=is_hybrid)
        if not self._warned_long_prompt:
            logger.warning(
                "A prompt has %d tokens, more than max_prompt_length=%d: keeping its last %d tokens. "
                "Raise max_prompt_length or shorten the prompts.", len(ids), limit, limit,
            )
            self._warned_long_prompt = True
        return RolloutRow(prompt_ids=ids[-limit:], prompt_truncated=True, is_hybrid=is_hybrid)

    def _own_question_ids(self, question_ids: Sequence[str | None] | None, n: int) -> list[str | None]:
        """Each row's question id to retrieve among (``retrieve_own_question``), else ``None`` each."""
        if question_ids is not None and len(question_ids) != n:
            raise ValueError(f"run() got {len(question_ids)} question ids for {n} rows.")
        return list(question_ids) if question_ids is not None and self.config.retrieve_own_question else [None] * n

    def _tool_tables(self, row_tools: Sequence[ToolTable] | None, n: int) -> list[ToolTable]:
        """Each row's JSON tools: its own table, else the engine's."""
        if row_tools is not None and len(row_tools) != n:
            raise ValueError(f"run() got {len(row_tools)} tool tables for {n} rows.")
        return list(row_tools) if row_tools is not None else [self.json_tools] * n

    def _generate(self, rows: list[RolloutRow], active: list[int], carried: dict[int, HeldTurn], at_plan: bool,
                  stats: RolloutStats) -> list[TurnOutput]:
        """One turn of the active rows, each within its turn and completion budgets; stopping at the plan's end too
        on the plan turn."""
        cfg = self.config
        budgets = [min(cfg.max_turn_tokens - (carried[i].sampled if i in carried else 0),
                       cfg.max_completion_length - len(rows[i].completion_ids)) for i in active]
        stops = self.stop_strings + ([cfg.plan_stop] if at_plan else [])
        start = time.perf_counter()
        outputs = self.backend.generate([rows[i].prompt_ids + rows[i].completion_ids for i in active], budgets, stops)
        stats.generate_seconds += time.perf_counter() - start
        return outputs

    def _turn_end(self, row: RolloutRow, out: TurnOutput, step_start: int, tools: ToolTable,
                  at_plan: bool) -> tuple[str, str | list[dict] | None] | str:
        """How the turn just appended ended: the call it made (``(tag, content)``, or ``("json", tool_calls)``),
        ``PLAN_CLOSED``, or ``ENDED`` (the row finished or was truncated, marked here)."""
        cfg = self.config
        json_calls = parse_json_turn(self.chat_tools, row, step_start, tools) if self.chat_tools is not None else None
        if json_calls and out.finish == "eos":
            return "json", json_calls
        if out.finish == "eos":
            row.finished = True
        elif out.finish == "stop" and out.stop_string == cfg.answer_stop:
            row.finished = True
            close_episode(row, self.tokenizer.eos_token_id, cfg.max_completion_length)
        elif out.finish == "length" or len(row.completion_ids) >= cfg.max_completion_length:
            row.truncated = True
        elif at_plan and out.stop_string == cfg.plan_stop:
            return PLAN_CLOSED
        else:
            text = self.tokenizer.decode(row.completion_ids[step_start:], skip_special_tokens=False)
            return extract_tool_call(text, out.stop_string)
        return ENDED

    def _retrieve(self, rows: list[RolloutRow], reached: dict[int, str], prefixes: list[str],
                  own: list[str | None], retrieve_prob: float, stats: RolloutStats) -> None:
        """Let the hybrid rows at the boundaries ``reached`` (row -> boundary) draw a retrieval, timed."""
        start = time.perf_counter()
        self.retrieval.retrieve(rows, reached, prefixes, own, retrieve_prob)
        stats.retrieval_seconds += time.perf_counter() - start

    def _run_tool_calls(self, rows: list[RolloutRow], calls: list[TurnCall], tables: list[ToolTable],
                        stats: RolloutStats) -> list[int]:
        """Run the turn's calls and append their results; returns the rows that completed a tool step, in call
        order."""
        start = time.perf_counter()
        if self.chat_tools is not None:
            limited = run_json_calls(self.chat_tools, rows, calls, tables, self.config)
            # A row whose results did not fit ended with its call turn, as in TRL: no step to retrieve after.
            calls = [call for call in calls if not rows[call[0]].finished]
        else:
            limited = run_tag_calls(rows, calls, self.tools, self.config, self.encode)
        # A turn whose every call was past max_tool_calls ran no tool: the limit notice is no tool step, and a
        # retrieval after it would hand the row a later stored step at each such turn.
        stepped = [i for i, _, _ in calls if i not in limited]
        stats.tool_seconds += time.perf_counter() - start
        return stepped

    def _settle_plan_rows(self, rows: list[RolloutRow], planned: list[int], carried: dict[int, HeldTurn]) -> None:
        """After the plan boundary: a row that retrieved there made its plan a step of its own; one that did not goes
        on in the same step, unless the plan already spent the turn's budget."""
        for i in planned:
            if rows[i].segments[-1].kind != "policy":
                del carried[i]
            elif carried[i].sampled >= self.config.max_turn_tokens:  # cut, as one long turn would be
                rows[i].truncated = True

    def get_state(self) -> dict:
        """RNG state and the run's store-error count (``rapo/store_errors`` is cumulative) for checkpoints."""
        return {"rng": self.rng.getstate(), "store_errors": self.store_outage.given_up}

    def set_state(self, state: dict) -> None:
        self.rng.setstate(_as_tuple(state["rng"]))
        self.store_outage.given_up = int(state.get("store_errors", 0))  # absent from older checkpoints


def _as_tuple(value):
    """JSON turns the RNG state's tuples into lists; ``random.setstate`` needs tuples back."""
    if isinstance(value, list):
        return tuple(_as_tuple(v) for v in value)
    return value
