"""RAPO's outcome reward (docs/design.md): -1 on a format failure, else F1 plus a multi-tool bonus."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from rapo_trl.rewards.format import TOOL_TAGS, _checked_tags, format_check, mask_results, tools_used
from rapo_trl.rewards.parsing import answer_blocks, completion_text, last_boxed, strip_retrieved_blocks
from rapo_trl.rewards.scoring import best_over_golds, golds_from_kwargs, token_f1

logger = logging.getLogger("rapo_trl.rewards")


class RapoOutcomeReward:
    """TRL reward function computing RAPO's outcome reward for each completion.

    Args:
        strip_retrieved: score the completion with its ``<retrieve>`` blocks removed (default), so a
            retrieved ``<answer>`` neither counts nor breaks the format; False scores them as the
            reference code does.
        multi_tool_bonus: added when F1 > 0 and every tool in ``bonus_tools`` was called.
        format_penalty: the reward for a completion that fails the format check.
        bonus_tools: the tools that must all be used to earn the bonus.
        name: the name TRL logs the reward under.
        tool_tags: the tags that are tool calls for the format check. None (default): ``<python>``,
            ``<search>`` and any other tag a completion uses as a call, closing it right before a
            ``<result>`` block (a function tool such as ``<add>``); see ``format_check``. Give the tags of
            the tools you train with to also fail a call of them that has no result block.
    """

    def __init__(
        self,
        strip_retrieved: bool = True,
        multi_tool_bonus: float = 0.1,
        format_penalty: float = -1.0,
        bonus_tools: tuple[str, ...] = TOOL_TAGS,
        name: str = "rapo_outcome_reward",
        tool_tags: Iterable[str] | None = None,
    ):
        self.strip_retrieved = strip_retrieved
        self.multi_tool_bonus = multi_tool_bonus
        self.format_penalty = format_penalty
        self.bonus_tools = tuple(bonus_tools)
        self.tool_tags = None if tool_tags is None else _checked_tags(tool_tags)
        # TRL names a callable instance by ``__name__`` when it has one (else by its class).
        self.__name__ = name

    @property
    def max_reward(self) -> float:
        """The best reward a completion can get."""
        return 1.0 + max(self.multi_tool_bonus, 0.0)

    def score(self, text: str, golds: list[str]) -> float:
        """The outcome reward of one completion text against its gold answers."""
        return self._score(text, golds)[0]

    def _score(self, text: str, golds: list[str]) -> tuple[float, str | None]:
        if self.strip_retrieved:
            text = strip_retrieved_blocks(text)
        ok, reason = format_check(text, self.tool_tags)
        if not ok:
            logger.debug("%s: format failure (%s)", self.__name__, reason)
            return self.format_penalty, reason
        # Read the answer where the check found it: outside tool results.
        prediction = last_boxed(answer_blocks(mask_results(text))[0]) or ""
        f1 = best_over_golds(token_f1, prediction, golds)
        if f1 > 0 and tools_used(text, self.tool_tags).issuperset(self.bonus_tools):
            return f1 + self.multi_tool_bonus, None
        return f1, None

    def __call__(self, prompts=None, completions=None, completion_ids=None, **kwargs: Any) -> list[float]:
        golds = golds_from_kwargs(kwargs, len(completions))
        scored = [self._score(completion_text(c), g) for c, g in zip(completions, golds)]
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and scored:
            # TRL averages this over the logging step: how often the policy still breaks the format.
            log_metric(
                f"{self.__name__}/format_failure_rate", sum(r is not None for _, r in scored) / len(scored)
            )
        return [reward for reward, _ in scored]

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(strip_retrieved={self.strip_retrieved}, "
            f"multi_tool_bonus={self.multi_tool_bonus}, format_penalty={self.format_penalty}"
            + (f", tool_tags={self.tool_tags}" if self.tool_tags is not None else "")
            + ")"
        )


def make_rapo_outcome_reward(
    strip_retrieved: bool = True,
    multi_tool_bonus: float = 0.1,
    format_penalty: float = -1.0,
    bonus_tools: tuple[str, ...] = TOOL_TAGS,
    name: str = "rapo_outcome_reward",
    tool_tags: Iterable[str] | None = None,
) -> RapoOutcomeReward:
    """Build RAPO's outcome reward with non-default settings (see ``RapoOutcomeReward``)."""
    return RapoOutcomeReward(strip_retrieved, multi_tool_bonus, format_penalty, bonus_tools, name, tool_tags)


rapo_outcome_reward = make_rapo_outcome_reward()
