"""The plan stop leaves rows that do not retrieve there as they would be without it: one policy step across the
stop, the same turn budget, the same tool call."""

from __future__ import annotations

import pytest

from rapo_trl.rollout import HybridRolloutEngine, RolloutConfig
from rapo_trl.rollout.backends.base import find_stop
from rapo_trl.rollout.types import TurnOutput
from tests.helpers.fakes import EchoTool, FixedStore, prompts_for


class StreamBackend:
    """A deterministic 'model': each row (by its prompt) says its fixed text one token at a time, whatever was
    forced in between, and stops where a real backend would (``find_stop``). Entropies depend on the position."""

    def __init__(self, tokenizer, texts_by_prompt: dict[tuple, str]):
        self.tokenizer = tokenizer
        self.streams = {key: tokenizer(text, add_special_tokens=False)["input_ids"]
                        for key, text in texts_by_prompt.items()}
        self.said = dict.fromkeys(self.streams, 0)

    def _key(self, sequence):
        return next(key for key in self.streams if tuple(sequence[: len(key)]) == key)

    def generate(self, sequences, max_new_tokens, stop_strings):
        outputs = []
        for sequence, budget in zip(sequences, max_new_tokens):
            key = self._key(list(sequence))
            start = self.said[key]
            ids = self.streams[key][start : start + budget]
            length, finish, stop = find_stop(self.tokenizer, ids, stop_strings, {self.tokenizer.eos_token_id})
            if finish == "length" and not ids:
                finish = "eos"
            ids = ids[:length]
            self.said[key] = start + len(ids)
            positions = range(start, start + len(ids))
            outputs.append(TurnOutput(ids, finish if ids else "eos", stop, None,
                                      [0.1 * (p % 7) for p in positions], [0.01 * (p % 5) for p in positions]))
        return outputs


TEXTS = ["<think>add the two numbers first</think><python>1 + 2</python>", "<answer>3</answer>"]


def rollout(tiny_model, retrieve_at, max_turn_tokens=64, retrieve_prob=1.0):
    _, tokenizer = tiny_model
    prompts = prompts_for(tokenizer, 2)
    backend = StreamBackend(tokenizer, {tuple(p): "".join(TEXTS) for p in prompts})
    config = RolloutConfig(max_completion_length=256, max_turn_tokens=max_turn_tokens, retrieve_prob=retrieve_prob,
                           retrieve_at=retrieve_at)
    engine = HybridRolloutEngine(tokenizer, backend, [EchoTool()], FixedStore(), config, seed=0)
    return engine.run(prompts, hybrid=[True, False])


def as_tuple(row):
    return (row.completion_ids, row.env_mask, [(s.kind, s.start, s.end, s.entropy) for s in row.segments],
            row.truncated, row.finished, row.tool_calls)


def test_on_policy_rows_are_unchanged_by_the_plan_boundary(tiny_model):
    hybrid, plain = rollout(tiny_model, ("plan", "tool_step"))
    _, reference = rollout(tiny_model, ("tool_step",))
    assert [e.boundary for e in hybrid.retrievals][:1] == ["plan"]  # the hybrid row did stop at the plan
    assert as_tuple(plain) == as_tuple(reference)
    assert [s.kind for s in plain.segments][:2] == ["policy", "tool"]  # one step across the plan stop


def test_a_hybrid_row_that_draws_no_retrieval_is_unchanged_too(tiny_model):
    hybrid, _ = rollout(tiny_model, ("plan",), retrieve_prob=1e-12)
    reference, _ = rollout(tiny_model, ("tool_step",), retrieve_prob=1e-12)
    assert hybrid.retrievals == [] and as_tuple(hybrid) == as_tuple(reference)


@pytest.mark.parametrize("spare", [-1, 0, 1])
def test_the_turn_budget_is_carried_across_the_plan_stop(tiny_model, spare):
    # A budget that fits the plan but not the plan and the tool call together: the first step is cut exactly as
    # without the stop (a fresh budget after the plan would let it finish).
    _, tokenizer = tiny_model
    first_step = len(tokenizer(TEXTS[0], add_special_tokens=False)["input_ids"])
    _, plain = rollout(tiny_model, ("plan", "tool_step"), max_turn_tokens=first_step + spare)
    _, reference = rollout(tiny_model, ("tool_step",), max_turn_tokens=first_step + spare)
    assert reference.truncated == (spare < 0)
    assert as_tuple(plain) == as_tuple(reference)


def test_the_step_after_a_start_retrieval_is_the_whole_turn_across_the_plan_stop(tiny_model):
    # Seed 1 draws 0.13 then 0.85: at p 0.5 the row retrieves at the start, not at its plan, so its first step runs
    # on past the plan stop; the start retrieval's 'post' entropy is that whole step's, not its plan's alone.
    _, tokenizer = tiny_model
    prompts = prompts_for(tokenizer, 1)
    backend = StreamBackend(tokenizer, {tuple(p): "".join(TEXTS) for p in prompts})
    config = RolloutConfig(max_completion_length=256, max_turn_tokens=64, retrieve_prob=0.5,
                           retrieve_at=("start", "plan"), step_entropy="full")
    engine = HybridRolloutEngine(tokenizer, backend, [EchoTool()], FixedStore(), config, seed=1)
    (row,) = engine.run(prompts, hybrid=[True])
    (event,) = row.retrievals
    assert event.boundary == "start" and [s.kind for s in row.segments][:3] == ["retrieved", "policy", "tool"]
    assert event.entropy_post == row.policy_steps[0].entropy
