"""Retrievals you can see: the share of stored steps from the row's own question, the share that hold a final answer,
and the reward of hybrid rows shown a stored step beside the on-policy rows; from hand-made rows, and from a scripted
training step. Also ``retrieve_own_question``: the trainer hands each row's question id to the store."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch
from accelerate import Accelerator

from rapo_trl.core.rows import RetrievalEvent, RolloutRow
from rapo_trl.rollout import Rollout, RolloutStats
from rapo_trl.trainer.metrics import gathered_mean, gathered_sum, means_where_defined
from rapo_trl.trainer.retrieval_view import (
    retrieval_view_metrics,
    rewards_by_retrieval,
    stored_steps_shown,
)
from rapo_trl.trainer.step_rollout import StepHooks, roll_out_step
from tests.helpers.fakes import FixedStore, Found
from tests.helpers.scripted import Turn
from tests.helpers.trainers import dataset, rapo_trainer, script

NAN = float("nan")
ANSWER_STEP = "<think>so</think>\n<answer>\\boxed{7}</answer>"
TOOL_STEP = "<think>add</think>\n<python>print(1)</python>\n<result>\n1\n</result>\n"


def event(question_id=None, text=TOOL_STEP, fallback=False):
    return RetrievalEvent(after_step=0, start=0, end=1, is_fallback=fallback, record_id=None if fallback else "r",
                          reward=None, similarity=None, text=None if fallback else text,
                          question_id=None if fallback else question_id)


def row(*events, hybrid=True):
    return RolloutRow([1], completion_ids=[2, 3], is_hybrid=hybrid, retrievals=list(events))


def test_stored_steps_shown_counts_stored_steps_not_fallbacks():
    rows = [row(event("q0", ANSWER_STEP), event("q1"), event(fallback=True)),  # own answer step, another's step
            row(event("q9", ANSWER_STEP)),  # its row has no question id: in the answer share only
            row(event(None)),  # a store that does not say whose step: in the answer share only
            row(hybrid=False)]
    own, answer = stored_steps_shown(rows, ["q0", None, "q2", "q3"])
    assert own == [1.0, 0.0]
    assert answer == [1.0, 0.0, 1.0, 0.0]
    assert stored_steps_shown(rows, None) == ([], answer)  # no question ids at all: no own-question share


def test_rewards_by_retrieval_splits_hybrid_rows_shown_a_step_from_on_policy_rows():
    rows = [row(event("q")), row(event("q"), event(fallback=True)), row(event(fallback=True)), row(),
            row(hybrid=False), row(hybrid=False), row(event("q"))]
    retrieved, on_policy = rewards_by_retrieval(rows, [1.0, 2.0, 5.0, 6.0, 0.5, 0.0, NAN])
    # hybrid rows with only a fallback or nothing inserted are neither; an unscorable row (NaN) is left out
    assert retrieved == [1.0, 2.0] and on_policy == [0.5, 0.0]


def test_a_share_of_nothing_is_not_logged():
    accelerator = Accelerator(cpu=True)
    got = means_where_defined({"a": [1.0, 0.0, 0.0, 1.0], "b": []},
                              lambda v: gathered_mean(accelerator, v), lambda v: gathered_sum(accelerator, v))
    assert got == {"a": 0.5}


def test_retrieval_view_metrics_of_one_process():
    rows = [row(event("q0", ANSWER_STEP)), row(event("q1")), row(event("q0")), row(hybrid=False)]
    metrics = retrieval_view_metrics(rows, ["q0"] * 4, torch.tensor([3.0, 1.0, 2.0, 0.5]), Accelerator(cpu=True))
    assert metrics == pytest.approx({"rapo/retrieved_own_question_share": 2 / 3, "rapo/retrieved_answer_share": 1 / 3,
                                     "rapo/reward_hybrid_retrieved": 2.0, "rapo/reward_on_policy": 0.5})
    plain = retrieval_view_metrics([row(hybrid=False)] * 2, None, torch.tensor([1.0, 0.0]), Accelerator(cpu=True))
    assert plain == {"rapo/reward_on_policy": 0.5}



def test_where_the_advantage_went_rows_shown_a_stored_step_and_on_policy_rows():
    # a hybrid row shown a stored step, a hybrid row shown only the fallback, two on-policy rows
    rows = [row(event("q0")), row(event(fallback=True)), row(hybrid=False), row(hybrid=False)]
    advantages = torch.tensor([1.5, 0.5, 1.0, -3.0])
    metrics = retrieval_view_metrics(rows, None, torch.zeros(4), Accelerator(cpu=True), advantages)
    assert metrics["rapo/positive_advantage_share_retrieved"] == pytest.approx(1.5 / 3.0)
    assert metrics["rapo/positive_advantage_mass_retrieved"] == 1.5  # the fallback-only row is neither
    assert metrics["rapo/positive_advantage_mass_on_policy"] == 1.0
    assert metrics["rapo/on_policy_advantage_sum"] == -2.0 and metrics["rapo/on_policy_negative_share"] == 0.5
    flat = retrieval_view_metrics(rows, None, torch.zeros(4), Accelerator(cpu=True), torch.zeros(4))
    assert "rapo/positive_advantage_share_retrieved" not in flat  # no credit given: nothing to share
    assert flat["rapo/on_policy_negative_share"] == 0.0 and flat["rapo/positive_advantage_mass_on_policy"] == 0.0
    per_token = torch.tensor([[1.0, 2.0], [0.0, 0.0], [-1.0, -3.0], [4.0, 0.0]])  # a row's credit is its mean
    tokens = retrieval_view_metrics(rows, None, torch.zeros(4), Accelerator(cpu=True), per_token)
    assert tokens["rapo/positive_advantage_mass_retrieved"] == 1.5
    assert tokens["rapo/on_policy_advantage_sum"] == 0.0 and tokens["rapo/on_policy_negative_share"] == 0.5
    hybrid_only = retrieval_view_metrics(rows[:2], None, torch.zeros(2), Accelerator(cpu=True), advantages[:2])
    assert "rapo/on_policy_negative_share" not in hybrid_only and "rapo/on_policy_advantage_sum" not in hybrid_only


def test_each_process_reads_its_own_slice_of_the_gathered_rewards():
    second = SimpleNamespace(process_index=1, device="cpu", gather=lambda t: t)  # rank 1 of 2, alone in this test
    rows = [row(event("q")), row(hybrid=False)]  # its rows are the batch's rows 2 and 3
    metrics = retrieval_view_metrics(rows, None, torch.tensor([9.0, 9.0, 2.0, 0.5]), second)
    assert metrics["rapo/reward_hybrid_retrieved"] == 2.0 and metrics["rapo/reward_on_policy"] == 0.5


# ------------------------------------------------------------------ in a training step


class ScriptedStore:
    """Answers each ``select`` call with the next scripted list; remembers the question ids it was given."""

    def __init__(self, answers):
        self.answers, self.asked = list(answers), []

    def select(self, contexts, question_ids=None):
        self.asked.append(question_ids)
        found = self.answers.pop(0)
        assert len(found) == len(contexts)
        return found


FALLBACK = Found("Reason on your own.", is_fallback=True, record_id=None, reward=None, similarity=None)
# Rows 0-2 hybrid, row 3 on-policy. Row 0 retrieves after each of its two tool calls (own answer step; fallback),
# row 1 after each of its two (another question's step; own tool step), row 2 calls no tool (no retrieval).
SCRIPTS = [
    [Turn("<python>1</python>"), Turn("<python>5</python>"), Turn("<answer>777</answer>"), Turn("<|im_end|>")],
    [Turn("<python>2</python>"), Turn("<python>4</python>"), Turn("<answer>77</answer>"), Turn("<|im_end|>")],
    [Turn("<answer>7777</answer><|im_end|>")],
    [Turn("<python>3</python>"), Turn("<answer>7</answer>"), Turn("<|im_end|>")],
]
ANSWERS = [[Found(ANSWER_STEP, question_id="q-own"), Found(TOOL_STEP, question_id="q-other")],
           [FALLBACK, Found(TOOL_STEP, question_id="q-own")]]


def inputs_with(question_id):
    rows = [dict(r) for r in dataset()] * 4
    return [{**r, "question_id": question_id} if question_id else r for r in rows]


def step(tiny_model_dir, tmp_path, store, inputs, **options):
    trainer = rapo_trainer(tiny_model_dir, tmp_path, store=store, retrieve_prob=1.0, num_hybrid_generations=3,
                           max_completion_length=512, **options)
    script(trainer, SCRIPTS)
    trainer.model.train()
    trainer._generate_and_score_completions(inputs)
    return trainer, {name: values[-1] for name, values in trainer._metrics["train"].items()}


def test_a_training_step_logs_the_shares_and_the_rewards_by_retrieval(tiny_model_dir, tmp_path):
    store = ScriptedStore(ANSWERS)
    trainer, logged = step(tiny_model_dir, tmp_path, store, inputs_with("q-own"))
    rows = trainer.last_rollout.rows
    assert [len(r.retrievals) for r in rows] == [2, 2, 0, 0] and [r.is_hybrid for r in rows] == [True] * 3 + [False]
    assert trainer.last_rollout.rewards.tolist() == [3.0, 2.0, 4.0, 1.0]  # the 7s of each row's own answer
    # three stored steps (the fallback is none): two of the row's own question, one a final answer
    assert logged["rapo/retrieved_own_question_share"] == pytest.approx(2 / 3)
    assert logged["rapo/retrieved_answer_share"] == pytest.approx(1 / 3)
    # rows 0 and 1 were shown a stored step; row 2 is hybrid but retrieved nothing, so it is neither
    assert logged["rapo/reward_hybrid_retrieved"] == pytest.approx(2.5)
    assert logged["rapo/reward_on_policy"] == pytest.approx(1.0)
    assert store.asked == [None, None]  # similarity alone: the option is off


def test_the_completions_table_says_what_each_row_was_shown(tiny_model_dir, tmp_path):
    # log_completions: TRL writes one table a logged step; RAPO adds per-row columns beside its rewards
    trainer, _ = step(tiny_model_dir, tmp_path, ScriptedStore(ANSWERS), inputs_with("q-own"), log_completions=True)
    extra = {column: list(values) for column, values in trainer._logs["extra"].items()}
    assert extra["rapo_hybrid"] == [True, True, True, False]
    assert extra["rapo_stored_steps_shown"] == [1, 2, 0, 0]  # row 0's second retrieval was the fallback
    assert extra["rapo_answer_step_shown"] == [True, False, False, False]


def test_rows_without_question_ids_leave_the_own_question_share_out(tiny_model_dir, tmp_path):
    _, logged = step(tiny_model_dir, tmp_path, ScriptedStore(ANSWERS), inputs_with(None))
    assert "rapo/retrieved_own_question_share" not in logged
    assert logged["rapo/retrieved_answer_share"] == pytest.approx(1 / 3)


def test_without_retrieval_only_the_on_policy_reward_is_logged(tiny_model_dir, tmp_path):
    _, logged = step(tiny_model_dir, tmp_path, None, inputs_with("q-own"))
    assert logged["rapo/reward_on_policy"] == pytest.approx(1.0)
    assert not {"rapo/reward_hybrid_retrieved", "rapo/retrieved_own_question_share",
                "rapo/retrieved_answer_share"} & set(logged)


def test_retrieve_own_question_hands_each_rows_question_id_to_the_store(tiny_model_dir, tmp_path):
    store = ScriptedStore(ANSWERS)
    step(tiny_model_dir, tmp_path, store, inputs_with("q-own"), retrieve_own_question=True)
    assert store.asked == [["q-own", "q-own"], ["q-own", "q-own"]]


def test_retrieve_own_question_warns_when_it_cannot_be_served(tiny_model_dir, tmp_path, caplog):
    from rapo_trl.trainer.checks import warn_if_nothing_to_retrieve

    trainer = rapo_trainer(tiny_model_dir, tmp_path, store=FixedStore(), retrieve_own_question=True)
    with caplog.at_level(logging.WARNING, logger="rapo_trl.trainer"):
        warn_if_nothing_to_retrieve(trainer.args, FixedStore(), dataset())
        warn_if_nothing_to_retrieve(trainer.args, ScriptedStore([]), dataset().add_column("question_id", ["q"]))
    messages = [r.getMessage() for r in caplog.records]
    assert any("select takes no question_ids" in m for m in messages)
    assert sum("no question_id column" in m for m in messages) == 1


class RecordingEngine:
    """An engine that rolls out nothing and remembers the question ids of each rollout."""

    store = object()

    def __init__(self):
        self.asked = []

    def roll_out(self, prompt_ids, prefixes, hybrid, retrieval_enabled=True, question_ids=None, retrieve_prob=None,
                 row_tools=None):
        self.asked.append(question_ids)
        rows = [RolloutRow(list(ids), completion_ids=[1], is_hybrid=flag) for ids, flag in zip(prompt_ids, hybrid)]
        return Rollout(rows, RolloutStats())


@pytest.mark.parametrize("guided", [False, True])
def test_the_rollout_stage_passes_each_rows_question_id(guided):
    engine = RecordingEngine()
    inputs = [{"question_id": q} for q in ("a", "a", 7, None)]
    hooks = StepHooks(score=lambda rows_in, rows: torch.zeros(len(rows)), gather=lambda t: t, mean=None, total=None)
    args = SimpleNamespace(retrieve_failed_groups_max_reward=0.0 if guided else None, dynamic_sampling_max_rounds=0)
    roll_out_step(engine, inputs, [[1]] * 4, [""] * 4, [True, True, False, False], group_size=4, offset=0,
                  retrieve_prob=0.5, args=args, hooks=hooks)
    # guided: the on-policy rows first (retrieval off: no ids needed), then the hybrid rows with theirs
    assert engine.asked == ([None, ["a", "a"]] if guided else [["a", "a", "7", None]])


def test_dynamic_samplings_replacement_rows_roll_out_with_their_own_question_ids(tiny_model_dir, tmp_path):
    trainer = rapo_trainer(tiny_model_dir, tmp_path, store=ScriptedStore([]), retrieve_own_question=True)
    engine = trainer.rollout_engine = RecordingEngine()
    inputs = inputs_with("q-own")
    hooks = trainer._step_hooks([row["prompt"] for row in inputs], inputs, retrieve_prob=0.5)
    hooks.roll_out_rows([{**inputs[0], "question_id": "q-new"}, {"prompt": inputs[0]["prompt"]}], [True, False])
    assert engine.asked == [["q-new", None]]
