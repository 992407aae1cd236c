"""The "when to retrieve" rule (hybrid rows: tests/rollout/test_engine.py): p and its schedule, step boundaries, seeded draws, failed groups."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from rapo_trl import RAPOConfig
from rapo_trl.core.retrieval_rule import (
    RETRIEVAL_BOUNDARIES,
    RETRIEVAL_TRIGGERS,
    boundaries_at_start,
    boundaries_reached,
    check_json_tools_reach,
    check_own_step_reach,
    checked_boundaries,
    failed_groups,
    guided_flags,
    holds_plan_turn,
    rows_that_retrieve,
    scheduled_retrieve_prob,
)

NAN = float("nan")


@pytest.mark.parametrize("final", [None, 0.2])
def test_p_starts_at_retrieve_prob_and_a_final_value_is_reached_at_the_last_step(final):
    def p(step, max_steps=10):
        return scheduled_retrieve_prob(0.8, final, step, max_steps)

    assert p(0) == pytest.approx(0.8)
    assert p(10) == pytest.approx(0.8 if final is None else 0.2)
    assert p(20) == p(10)  # past the last step p stays at its end value
    assert p(5, max_steps=0) == 0.8  # no step count (an iterable dataset without max_steps): p is held


def test_the_decay_is_linear():
    assert [scheduled_retrieve_prob(1.0, 0.0, step, 8) for step in range(9)] == pytest.approx(
        [1 - step / 8 for step in range(9)])


def test_the_config_reads_its_schedule_fields():
    args = RAPOConfig(output_dir="/tmp/x", use_cpu=True, bf16=False, retrieve_prob=0.6, retrieve_prob_final=0.1)
    assert args.retrieve_prob_at(0, 10) == pytest.approx(0.6)
    assert args.retrieve_prob_at(5, 10) == pytest.approx(0.35)
    assert args.retrieve_prob_at(10, 10) == pytest.approx(0.1)


def test_boundaries_are_checked_and_kept_once_each():
    assert checked_boundaries("plan") == ("plan",)
    assert checked_boundaries(["tool_step", "plan", "tool_step"]) == ("tool_step", "plan")
    for bad in ([], ["later"], ["tool_step", "group_failed"]):
        with pytest.raises(ValueError, match="retrieve_at takes one or more of"):
            checked_boundaries(bad)


def test_the_first_turn_is_held_at_the_plan_only_when_a_hybrid_row_may_retrieve_there():
    assert holds_plan_turn(True, ("plan",), [False, True])
    assert not holds_plan_turn(True, ("plan",), [False, False])
    assert not holds_plan_turn(False, ("plan",), [True])
    assert not holds_plan_turn(True, ("tool_step",), [True])


def test_plan_rows_come_first_and_tool_steps_count_only_when_named():
    assert list(boundaries_reached([3], {0: 1, 1: 2}, ("tool_step", "plan")).items()) == [
        (3, "plan"), (0, "tool_step"), (1, "tool_step")]
    assert boundaries_reached([3], {0: 1, 1: 2}, ("plan",)) == {3: "plan"}


def test_first_tool_step_fires_at_a_rows_first_tool_step_only():
    # rows 0 and 2 completed their first tool step this turn, row 1 its second
    assert boundaries_reached([], {0: 1, 1: 2, 2: 1}, ("first_tool_step",)) == {0: "tool_step", 2: "tool_step"}
    assert boundaries_reached([3], {1: 2}, ("plan", "first_tool_step")) == {3: "plan"}
    # named beside tool_step it adds nothing: a row reaching a boundary draws once whatever fires there
    assert boundaries_reached([], {0: 1, 1: 2}, ("tool_step", "first_tool_step")) == {0: "tool_step", 1: "tool_step"}


def test_every_trigger_answers_a_boundary_the_engine_reports():
    assert {trigger.boundary for trigger in RETRIEVAL_TRIGGERS.values()} <= set(RETRIEVAL_BOUNDARIES)
    assert checked_boundaries(["first_tool_step", "plan"]) == ("first_tool_step", "plan")


def test_json_tool_rollouts_reach_tool_steps_but_no_plan():
    check_json_tools_reach(("tool_step", "first_tool_step"))
    with pytest.raises(ValueError, match="retrieve_at must be among"):
        check_json_tools_reach(("plan", "first_tool_step"))


def test_start_fires_once_per_row_at_the_start_only():
    assert boundaries_at_start(3, ("start",)) == {0: "start", 1: "start", 2: "start"}
    assert boundaries_at_start(3, ("tool_step", "plan", "first_tool_step")) == {}
    assert boundaries_at_start(2, ("start", "tool_step")) == {0: "start", 1: "start"}
    # never at a turn's boundaries: neither at the plan nor after a tool step, the first one included
    assert boundaries_reached([0], {1: 1, 2: 2}, ("start",)) == {}
    assert boundaries_reached([0], {1: 1}, ("start", "first_tool_step")) == {1: "tool_step"}
    assert not holds_plan_turn(True, ("start",), [True])


def test_at_the_start_only_hybrid_rows_draw_one_coin_each_in_row_order():
    rows = [SimpleNamespace(is_hybrid=hybrid, truncated=False) for hybrid in (True, False, True, False)]
    draws = random.Random(0)
    expected = [row for row in (0, 2) if draws.random() < 0.5]
    rng = random.Random(0)
    assert rows_that_retrieve(boundaries_at_start(4, ("start",)), rows, rng, 0.5) == expected
    assert rng.random() == draws.random()  # two draws in all: the on-policy rows draw none


def test_json_tool_rollouts_do_not_start_with_a_stored_step():
    with pytest.raises(ValueError, match="retrieve_at must be among"):
        check_json_tools_reach(("start",))


def test_a_step_as_the_policys_own_goes_anywhere_but_after_its_plan():
    check_own_step_reach(("start", "tool_step", "first_tool_step"))
    with pytest.raises(ValueError, match=r"retrieved_step_as_own .* must be among \['tool_step', 'first_tool_step', "
                                         r"'start'\], got \['start', 'plan'\]"):
        check_own_step_reach(("start", "plan"))


def test_the_first_turn_is_held_at_the_plan_only_for_a_plan_trigger():
    assert not holds_plan_turn(True, ("first_tool_step", "tool_step"), [True])
    assert holds_plan_turn(True, ("first_tool_step", "plan"), [True])


def test_each_hybrid_untruncated_row_draws_once_in_boundary_order():
    rows = [SimpleNamespace(is_hybrid=hybrid, truncated=truncated)
            for hybrid, truncated in [(True, False), (False, False), (True, True), (True, False)]]
    reached = {3: "plan", 0: "tool_step", 1: "tool_step", 2: "tool_step"}
    draws = random.Random(0)
    expected = [row for row in (3, 0) if draws.random() < 0.5]  # rows 1 (on-policy) and 2 (truncated) draw nothing
    rng = random.Random(0)
    assert rows_that_retrieve(reached, rows, rng, 0.5) == expected
    assert rng.random() == draws.random()  # the generator is left where two draws leave it


def test_failed_groups_reads_only_scored_rows():
    rewards = [NAN, NAN, 0.0, -1.0,   NAN, NAN, 0.0, 1.0,   NAN, NAN, NAN, NAN]
    assert failed_groups(rewards, 4, threshold=0.0) == [True, False, False]
    assert failed_groups(rewards, 4, threshold=1.0) == [True, True, False]


def test_a_row_is_guided_when_its_group_failed():
    # this process holds global rows 4..7 (offset 4) of groups of two; groups 2 and 3 are rows 4-5 and 6-7
    assert guided_flags([False, False, True, False], [0, 2, 3], offset=4, group_size=2) == [True, False, False]
