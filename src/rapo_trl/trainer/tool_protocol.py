"""Which tool protocol a trainer runs: the paper's inline tags, or JSON tool calls in the model's chat template
(TRL's ``tools=[fn]`` and ``environment_factory``), and what each refuses."""

from __future__ import annotations

import logging

from rapo_trl.tools.base import Tool

logger = logging.getLogger("rapo_trl.trainer")

TOOL_PROTOCOL_SETTINGS = ("auto", "tags", "json")
"""``RAPOConfig.tool_protocol`` values."""


def resolve_tool_protocol(setting: str, tools, environment_factory, dataset) -> str:
    """``"tags"`` or ``"json"`` for ``RAPOConfig.tool_protocol``; ``"auto"`` reads the setup:

    - an ``environment_factory`` is TRL's JSON protocol (its methods are JSON tools): ``"json"``;
    - a tag tool (an object with ``tag`` and ``run``, e.g. ``PythonTool``) is RAPO's: ``"tags"``;
    - only plain functions: ``"tags"`` when the training prompts teach them as tags (``to_rapo_rows(...,
      tools=...)`` writes ``<name>`` into the system prompt), else ``"json"``, as ``GRPOTrainer(tools=[fn])`` runs
      them on a dataset of its own;
    - no tools at all: ``"tags"`` (the paper's prompt format: ``</answer>`` ends a rollout).
    """
    if setting not in TOOL_PROTOCOL_SETTINGS:
        raise ValueError(f"tool_protocol must be one of {TOOL_PROTOCOL_SETTINGS}, got {setting!r}.")
    tools = list(tools or [])
    tag_tools = [tool for tool in tools if isinstance(tool, Tool)]
    if environment_factory is not None:
        if setting == "tags":
            raise ValueError("environment_factory exposes the environment's methods as JSON tool calls (TRL's "
                             "protocol): it needs tool_protocol='json' (or 'auto').")
        setting = "json"
    if setting == "json":
        if tag_tools:
            raise ValueError(f"With JSON tool calls every tool must be a plain typed function, as for TRL's "
                             f"GRPOTrainer(tools=[...]); {type(tag_tools[0]).__name__} is a tag tool. Use "
                             "tool_protocol='tags' for it.")
        return "json"
    if setting == "tags" or tag_tools or not tools:
        return "tags"
    taught = _teaches_tags(dataset, [getattr(tool, "__name__", "") for tool in tools])
    protocol = "tags" if taught else "json"
    logger.info("RAPO: tool_protocol='auto' chose %r: the training prompts %s the tools as <tag> calls.", protocol,
                "teach" if taught else "do not teach")
    return protocol


def _teaches_tags(dataset, names: list[str]) -> bool:
    try:
        prompt = dataset[0]["prompt"]
    except (TypeError, KeyError, IndexError, NotImplementedError):  # no dataset, or one that cannot be indexed
        return False
    if isinstance(prompt, list):
        text = "\n".join(str(m.get("content", "")) for m in prompt if isinstance(m, dict) and m.get("role") == "system")
    else:
        text = str(prompt)
    return any(f"<{name}>" in text for name in names if name)


def check_json_options(args, environment_factory) -> None:
    """Options that roll out rows outside the step's own environments cannot run with an ``environment_factory``."""
    if environment_factory is None:
        return
    for option, off in (("dynamic_sampling_max_rounds", 0), ("retrieve_failed_groups_max_reward", None)):
        if getattr(args, option) != off:
            raise ValueError(f"{option} rolls out and scores rows apart from the step's environments, which "
                             "environment_factory gives one per row of the step: it cannot be combined with "
                             "environment_factory yet.")
