"""Rewards learn the trainer's tool tags, so a made-up tool call with a forged <result> never scores; a training set
the rewards could not score is refused before the model loads."""

from __future__ import annotations

import asyncio
import functools
import re

import pytest
from datasets import Dataset
from trl.rewards import accuracy_reward
from trl.trainer.utils import get_callable_name, is_async_callable

from rapo_trl.config import RAPOConfig
from rapo_trl.rewards import f1_reward, rapo_outcome_reward
from rapo_trl.rewards.outcome import make_rapo_outcome_reward
from rapo_trl.trainer import RAPOTrainer
from rapo_trl.trainer.rewards import bind_tool_tags, check_reward_columns
from tests.helpers.fakes import EchoTool
from tests.helpers.trainers import common_args, dataset

FORGED = "<think>x</think><calc>2+2</calc>\n<result>\n4\n</result>\n<think>so</think><answer>\\boxed{4}</answer>"
HONEST = "<think>x</think><python>print(4)</python>\n<result>\n4\n</result>\n<think>so</think><answer>\\boxed{4}</answer>"


def score(reward, text):
    return reward(prompts=["q"], completions=[text], answer=["4"])[0]


def test_rapo_reward_gets_the_tools_tags_and_the_callers_object_is_untouched():
    assert score(rapo_outcome_reward, FORGED) > 0  # without tags a forged call passes the format check
    (bound,) = bind_tool_tags([rapo_outcome_reward], ["python"])
    assert bound.tool_tags == ("python",) and rapo_outcome_reward.tool_tags is None
    assert score(bound, FORGED) == -1.0 and score(bound, HONEST) > 0
    assert bound.__name__ == rapo_outcome_reward.__name__


def test_tags_the_user_gave_are_kept():
    own = make_rapo_outcome_reward(tool_tags=["python", "calc"])
    assert bind_tool_tags(own, ["python"]) is own


def test_functions_taking_tool_tags_get_them_others_are_left_alone():
    def tagged(completions, tool_tags=None, **kwargs):
        return [float(len(tool_tags))] * len(completions)

    def plain(completions, **kwargs):
        return [0.0] * len(completions)

    async def tagged_async(completions, tool_tags=None, **kwargs):
        return [float(len(tool_tags))] * len(completions)

    given = functools.partial(tagged, tool_tags=("a", "b", "c"))
    bound, same, kept, bound_async = bind_tool_tags([tagged, plain, given, tagged_async], ["python", "search"])
    assert bound(completions=["x"]) == [2.0] and get_callable_name(bound) == "tagged"
    assert same is plain and kept is given
    assert is_async_callable(bound_async) and asyncio.run(bound_async(completions=["x"])) == [2.0]
    assert bind_tool_tags("a/reward-model", ["python"]) == "a/reward-model"


def test_the_trainer_hands_its_tools_tags_to_the_rewards(tiny_model_dir, tmp_path):
    trainer = RAPOTrainer(str(tiny_model_dir), [rapo_outcome_reward], args=RAPOConfig(**common_args(tmp_path)),
                          train_dataset=dataset().add_column("answer", ["7"]), tools=[EchoTool()])
    (reward,) = trainer.reward_funcs
    assert reward.tool_tags == ("python",) and rapo_outcome_reward.tool_tags is None
    assert trainer.reward_func_names == ["rapo_outcome_reward"]


def test_callable_objects_keep_their_name_and_async_callables_stay_async():
    class Scored:
        def __call__(self, completions, tool_tags=None, **kwargs):
            return [float(len(tool_tags))] * len(completions)

    class ScoredAsync:
        async def __call__(self, completions, tool_tags=None, **kwargs):
            return [float(len(tool_tags))] * len(completions)

    def base(completions, tool_tags=None, scale=1.0, **kwargs):
        return [scale * len(tool_tags)] * len(completions)

    scored, scored_async, scaled = bind_tool_tags(
        [Scored(), ScoredAsync(), functools.partial(base, scale=2.0)], ["python"])
    assert [get_callable_name(f) for f in (scored, scored_async, scaled)] == ["Scored", "ScoredAsync", "base"]
    assert scored(completions=["x"]) == [1.0] and scaled(completions=["x"]) == [2.0]
    assert is_async_callable(scored_async) and asyncio.run(scored_async(completions=["x"])) == [1.0]


def _rows(**columns):
    return Dataset.from_list([{"prompt": [{"role": "user", "content": "2+2?"}], **columns}])


def needs_difficulty(completions, difficulty, scale=1.0, **kwargs):
    return [scale] * len(completions)


@pytest.mark.parametrize("rewards, rows, message", [
    (rapo_outcome_reward, Dataset.from_list([{"question": "2+2?", "answer": "4"}]), "has no 'prompt' column"),
    ([rapo_outcome_reward], _rows(label="4"), "reads the gold answer from a column answer or answers or solution"),
    ([f1_reward], _rows(label="4"), "f1_reward reads the gold answer"),
    ([accuracy_reward], _rows(answer="4"), "accuracy_reward needs the column(s) solution"),
    ([needs_difficulty], _rows(answer="4"), "needs_difficulty needs the column(s) difficulty"),
])
def test_a_training_set_the_rewards_cannot_score_is_refused_by_name(rewards, rows, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        check_reward_columns(rewards, rows)


def test_rewards_whose_columns_are_there_pass():
    check_reward_columns([rapo_outcome_reward, needs_difficulty, accuracy_reward],
                         _rows(answer="4", difficulty=1, solution="4"))
    check_reward_columns([functools.partial(needs_difficulty, difficulty=2)], _rows(answer="4"))
    check_reward_columns(["a/reward-model-id"], _rows())  # a reward model reads the text, not columns
    message = "add the column, e.g. dataset.add_column('solution', dataset['answer'])"
    with pytest.raises(ValueError, match=re.escape(message)):
        check_reward_columns([accuracy_reward], _rows(answer="4"))


def test_the_trainer_refuses_them_before_the_model_loads(tmp_path):
    with pytest.raises(ValueError, match=re.escape("needs the column(s) solution")):
        RAPOTrainer("no/such-model", [accuracy_reward], args=RAPOConfig(**common_args(tmp_path)),
                    train_dataset=_rows(answer="4"), tools=[EchoTool()])


RETRIEVED_ANSWER = ("<think>x</think><python>print(4)</python>\n<result>\n4\n</result>\n"
                    "<retrieve><answer>\\boxed{4}</answer></retrieve><think>so</think><answer>\\boxed{4}</answer>")


def test_score_retrieved_blocks_reaches_rewards_that_strip_them_by_pattern(tiny_model_dir, tmp_path, caplog):
    """The trainer's reward view keeps the blocks with the option on; RAPO's outcome reward, which strips them by
    pattern by default, would undo it (the reference code scores a handed answer and the policy's own as two)."""
    args = RAPOConfig(**common_args(tmp_path), score_retrieved_blocks=True)
    with caplog.at_level("WARNING"):
        trainer = RAPOTrainer(str(tiny_model_dir), [rapo_outcome_reward, f1_reward], args=args,
                              train_dataset=dataset().add_column("answer", ["7"]), tools=[EchoTool()])
    outcome, answer_only = trainer.reward_funcs
    assert score(outcome, RETRIEVED_ANSWER) == -1.0  # two answers: the format check fails, as the reference scores
    assert score(rapo_outcome_reward, RETRIEVED_ANSWER) > 0  # the caller's object is unchanged
    # an answer-only reward always reads the answer outside the blocks: named, not changed
    assert answer_only is f1_reward or getattr(answer_only, "func", None) is f1_reward
    assert "f1_reward" in caplog.text and "score_retrieved_blocks" in caplog.text
    default = RAPOTrainer(str(tiny_model_dir), [rapo_outcome_reward], args=RAPOConfig(**common_args(tmp_path)),
                          train_dataset=dataset().add_column("answer", ["7"]), tools=[EchoTool()])
    assert score(default.reward_funcs[0], RETRIEVED_ANSWER) > 0  # blocks stripped by default
