"""Rewards as the trainer uses them: reward functions see the trainer's tools (the format check then knows which
tags are real tool calls), and one weighted sum over reward functions, TRL's."""

from __future__ import annotations

import copy
import functools
import inspect
import logging

import torch

from rapo_trl.rewards.outcome import RapoOutcomeReward

logger = logging.getLogger("rapo_trl.trainer")


def bind_tool_tags(reward_funcs, tool_tags: list[str]):
    """``reward_funcs`` with the trainer's tool tags given to each reward that takes ``tool_tags`` and was not
    given them: a policy that invents a tag and writes its own ``<result>`` then fails the format check.

    The caller's objects are not changed (a copy of a ``RapoOutcomeReward``, a wrapper around a function).
    """
    if reward_funcs is None or not tool_tags:
        return reward_funcs
    single = not isinstance(reward_funcs, list)
    bound = [_bind(func, tuple(tool_tags)) for func in ([reward_funcs] if single else reward_funcs)]
    return bound[0] if single else bound


def _bind(func, tags: tuple[str, ...]):
    if isinstance(func, RapoOutcomeReward):
        if func.tool_tags is not None:
            return func
        bound = copy.copy(func)
        bound.tool_tags = tags
        return bound
    if not callable(func) or isinstance(func, str) or not _takes_tool_tags(func):
        return func  # a model id, a reward model, or a function without the parameter
    if isinstance(func, functools.partial) and "tool_tags" in func.keywords:
        return func
    # A partial: TRL sees through it for the reward's name and whether it is async (callable objects included),
    # and a tool_tags given at call time still wins.
    return functools.partial(func, tool_tags=tags)


def keep_retrieved_blocks(reward_funcs):
    """``reward_funcs`` for a trainer whose reward view keeps the retrieved blocks (``score_retrieved_blocks``): a
    ``RapoOutcomeReward`` that strips them by pattern would undo the option, so it is given a copy that keeps them (the
    caller's object unchanged); an answer-only reward, which always reads the answer outside them, is named in a
    warning."""
    single = not isinstance(reward_funcs, list)
    kept = []
    for func in [reward_funcs] if single else reward_funcs:
        if isinstance(func, RapoOutcomeReward) and func.strip_retrieved:
            func = copy.copy(func)
            func.strip_retrieved = False
        elif _is_answer_only(getattr(func, "func", func)):
            logger.warning("RAPO: score_retrieved_blocks=True, but %s reads the answer outside the retrieved blocks "
                           "whatever it is shown: a retrieved answer cannot count for or against it.",
                           _name(getattr(func, "func", func)))
        kept.append(func)
    return kept[0] if single else kept


def _is_answer_only(func) -> bool:
    """Whether ``func`` is one of RAPO's answer-only rewards (``rapo_trl/rewards/answer.py``): they read the gold
    answer and the completion's answer outside its retrieved blocks."""
    return getattr(func, "__module__", "") == "rapo_trl.rewards.answer"


def _takes_tool_tags(func) -> bool:
    try:
        parameters = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False
    parameter = parameters.get("tool_tags")
    return parameter is not None and parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)


def weighted_rewards(rewards_per_func: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Each row's reward as TRL's advantages see it: the weighted sum over reward functions, NaN where every
    function returned None (TRL leaves those rows out of the group baseline and gives them no advantage)."""
    rewards = (rewards_per_func * weights.to(rewards_per_func.device)).nansum(dim=1)
    rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
    return rewards


TRL_REWARD_ARGUMENTS = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric",
                        "environments", "tool_tags")
"""What GRPOTrainer (and RAPO's ``bind_tool_tags``) give every reward function besides the dataset's columns."""


def check_reward_columns(reward_funcs, train_dataset) -> None:
    """Refuse, before the model loads, a training set TRL could not prompt or score: no ``prompt`` column, a reward
    function's required argument that is no column, or no gold column for RAPO's answer-reading rewards. A dataset
    whose columns are unknown (an ``IterableDataset`` without features) is not checked."""
    from rapo_trl.rewards.scoring import GOLD_COLUMNS

    columns = getattr(train_dataset, "column_names", None)
    if not columns:
        return
    if "prompt" not in columns:
        raise ValueError(f"train_dataset has no 'prompt' column (it has: {', '.join(columns)}): TRL prompts the policy "
                         "with it. Build the rows with to_rapo_rows(dataset, tools=...) from question and answer "
                         "columns, or add a 'prompt' column.")
    for func in reward_funcs if isinstance(reward_funcs, list) else [reward_funcs]:
        # RAPO's outcome reward and every answer-only reward (rapo_trl/rewards/answer.py) read GOLD_COLUMNS.
        if isinstance(func, RapoOutcomeReward) or _is_answer_only(func):
            if not set(GOLD_COLUMNS) & set(columns):
                raise ValueError(f"{_name(func)} reads the gold answer from a column {' or '.join(GOLD_COLUMNS)}, "
                                 f"which train_dataset lacks (it has: {', '.join(columns)}). Rename the answer column "
                                 "(dataset.rename_column(...)), or build the rows with to_rapo_rows(..., "
                                 "answer_column=...).")
            continue
        missing = [name for name in _required_arguments(func) if name not in columns]
        if missing:
            hint = (" to_rapo_rows puts the gold answer in 'answer': add the column, e.g. "
                    f"dataset.add_column({missing[0]!r}, dataset['answer'])." if "answer" in columns else "")
            raise ValueError(f"the reward function {_name(func)} needs the column(s) {', '.join(missing)}, which "
                             f"train_dataset lacks (it has: {', '.join(columns)}); TRL passes a reward the dataset's "
                             f"columns by name.{hint}")


def _required_arguments(func) -> list[str]:
    """The arguments without a default that ``func`` takes by name, beyond those TRL always passes."""
    if not callable(func) or isinstance(func, (str, torch.nn.Module)):  # a reward model takes token ids
        return []
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return []
    by_name = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in parameters if p.kind in by_name and p.default is inspect.Parameter.empty
            and p.name not in TRL_REWARD_ARGUMENTS]


def _name(func) -> str:
    return getattr(func, "__name__", type(func).__name__)
