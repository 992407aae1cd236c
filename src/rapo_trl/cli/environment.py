"""``--environment_factory pkg.module.Class``: train on (and fill the store from) a TRL environment, as
``GRPOTrainer(environment_factory=...)`` takes it. The environment's methods are JSON tool calls in the model's chat
template; the rows are the plain questions (no tag-teaching system prompt: the template shows the tools); the reward
is the environment's ``get_reward`` unless ``--reward_funcs`` names others (summed with it, as TRL does)."""

from __future__ import annotations

from rapo_trl.cli.arguments import RAPOScriptArguments
from rapo_trl.cli.errors import UsageError
from rapo_trl.cli.imports import check_import_path, import_object


def check_environment(script: RAPOScriptArguments, command: str) -> None:
    """The import path exists (read from source, nothing imported), and the options it cannot take are refused."""
    if script.environment_factory is None:
        return
    check_import_path(script.environment_factory, "environment_factory")
    # The SFT stages render a stored trajectory as tag text in one assistant message: an environment's rollouts are
    # JSON calls in the chat template, each result a tool message, so they would teach a format RL never shows.
    stages = ("sft_warmup_steps", "sft_store_steps") if command == "train" else ("sft_warmup_steps",)
    for stage in stages:
        if getattr(script, stage) > 0:
            raise UsageError(f"{stage} imitates tagged trajectories; it does not run with environment_factory "
                             f"(set {stage} 0)")
    if command == "build-store" and script.agent == "expert":
        raise UsageError("the scripted expert solves the demo tasks' tags, not an environment: give build-store a "
                         "model as the agent (--agent org/name or a folder)")


def check_tool_protocol(script: RAPOScriptArguments, tool_protocol: str) -> None:
    """RAPOTrainer's refusals of a ``tool_protocol`` the recipe's tools cannot run under, before a warm start trains
    or a model loads: every tool the commands build is a tag tool (``build_tools``), and an environment's methods are
    JSON tool calls (``rapo_trl.trainer.tool_protocol.resolve_tool_protocol``)."""
    from rapo_trl.cli.common import tool_names

    if script.environment_factory is None:
        names = tool_names(script) if tool_protocol == "json" else []
        if names:
            raise UsageError(f"tool_protocol json calls plain typed functions in the chat template; the recipe's tools "
                             f"({', '.join(names)}) run as <tag> calls: set tool_protocol to tags or auto "
                             "(JSON tool calls come from --environment_factory)")
        return
    if tool_protocol == "tags":
        raise UsageError("environment_factory's methods are JSON tool calls in the chat template: it needs "
                         "tool_protocol json or auto, not tags")
    if script.tools is not None:
        raise UsageError("tools run as <tag> calls and environment_factory's methods as JSON tool calls, which one "
                         "rollout cannot mix: drop tools (the environment's methods are its tools)")


def environment_factory(script: RAPOScriptArguments):
    factory = import_object(script.environment_factory, "environment_factory")
    if not callable(factory):
        raise UsageError(f"environment_factory '{script.environment_factory}' is not a class or a function")
    return factory


def environment_rows(script: RAPOScriptArguments, split: str):
    """The questions as conversations without a system prompt of RAPO's (the chat template renders the tools); a
    conversation's own system turn is kept."""
    from rapo_trl.cli.common import load_questions, system_turn_column
    from rapo_trl.tasks import to_rapo_rows

    questions = load_questions(script, split)
    return to_rapo_rows(questions, tools=[], system_prompt=None, system_column=system_turn_column(questions))


def environment_rewards(script: RAPOScriptArguments, reward_weights):
    """``--reward_funcs`` when given, else none: the environment's ``get_reward`` scores (TRL adds it itself)."""
    if script.reward_funcs is None:
        return [], reward_weights
    from rapo_trl.cli.rewards import training_rewards

    return training_rewards(script, reward_weights)
