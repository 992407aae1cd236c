"""Rewards as the trainer uses them: reward functions see the trainer's tools (the format check then knows which
tags are real tool calls), and one weighted sum over reward functions, TRL's."""

from __future__ import annotations

import copy
import functools
import inspect

import torch

from rapo_trl.rewards.outcome import RapoOutcomeReward


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
