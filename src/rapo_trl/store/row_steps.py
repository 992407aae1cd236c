"""Step records cut from a rollout's own segments (JSON tool calls in a chat template), where the tag protocol's text
splitter (``steps.split_steps``) has no tags to cut at.

A step is one policy turn and the tool results shown after it. Its key is the context before it exactly as the
rollout engine queries the store (the question, then the completion decoded with special tokens skipped), so a
hybrid rollout of the same environment finds it; its value is the turn's text followed by its results in the
``<result>`` block the engine's retrieval code knows (``protocol.RESULT_TEMPLATE``), so the learnable span of a
retrieved step stops before its results.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rapo_trl.protocol import result_block
from rapo_trl.store.steps import StepRecord, preprocess_context, record_id, trajectory_id

if TYPE_CHECKING:  # the row's module imports torch, which a process that only reads or writes a store never needs
    from rapo_trl.core.rows import RolloutRow


def turn_results(row: RolloutRow) -> list[list[str]]:
    """For each parsed policy turn of ``row`` (its assistant messages, in order), the tool results shown after it."""
    results: list[list[str]] = []
    for message in row.messages:
        if message["role"] == "assistant":
            results.append([])
        elif message["role"] == "tool" and results:
            content = message["content"]
            results[-1].append(content if isinstance(content, str) else str(content))
    return results


def row_step_records(row: RolloutRow, tokenizer, question: str, reward: float, question_id: str,
                     source: str = "agent", preprocess=None, created_at: str | None = None) -> list[StepRecord]:
    """One record per policy turn of a JSON-tool rollout (retrieved blocks are not the agent's, and a turn that wrote
    nothing and was shown no result has no step: both are skipped);
    ``preprocess`` turns a context into a key (``TraceStore.preprocess``, as the store treats queries; default
    ``preprocess_context``)."""
    preprocess = preprocess or preprocess_context
    if not row.messages:
        raise ValueError("row_step_records reads the turns of a JSON-tool rollout (RolloutRow.messages); this row "
                         "has none. A tag trajectory is split by its text: TraceStore.add_trajectories.")
    turns = [s for s in row.segments if s.kind == "policy"]
    results = turn_results(row)
    decode = lambda ids: tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731 - the engine's decoding
    steps = []
    for index, turn in enumerate(turns[: len(results)]):
        shown = results[index]
        value = decode(row.completion_ids[turn.start:turn.end]).strip()
        if shown:
            value += result_block("\n".join(shown)).rstrip()
        if not value:  # only its end of turn: retrieved, it would insert an empty block where a step belongs
            continue
        # The agent's own context: a retrieved block (a policy row grown into the store) was never the agent's.
        before = [t for segment in row.segments if segment.end <= turn.start and segment.kind != "retrieved"
                  for t in row.completion_ids[segment.start:segment.end]]
        key = preprocess(f"{question}\n{decode(before)}")
        steps.append((key, value))
    traj_id = trajectory_id(question_id, "\x1e".join(value for _, value in steps))
    created_at = created_at or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return [StepRecord(record_id=record_id(traj_id, index), key=key, value=value, reward=float(reward),
                       question_id=question_id, step_index=index, num_steps=len(steps), source=source,
                       trajectory_id=traj_id, created_at=created_at)
            for index, (key, value) in enumerate(steps)]
