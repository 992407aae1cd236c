"""The reward functions of a recipe: built-in names or import paths, as ``trl grpo --reward_funcs`` takes them,
and the data columns they read. TRL passes every reward function the dataset's columns as keyword arguments; an
argument no column provides would fail at the first step, minutes in, so it is found first: TRL's own rewards
read the gold answer as ``solution``, which is fed from the answer column; any other is refused at once."""

from __future__ import annotations

import inspect

from rapo_trl.cli.arguments import RAPOScriptArguments, name_list
from rapo_trl.cli.errors import UsageError
from rapo_trl.cli.imports import TRL_REWARD_ARGUMENTS, check_import_path, import_object, is_import_path

REWARDS = ("rapo_outcome", "f1", "exact_match", "math")
SOLUTION = "solution"
"""The gold answer's name in TRL's reward functions (``trl.rewards.accuracy_reward(completions, solution)``)."""
ROW_COLUMNS = ("prompt", "question", "answer", "question_id")
"""Columns every training row has (`to_rapo_rows`); a task or dataset may add more."""


TRL_REWARDS = {name: f"trl.rewards.{name}" for name in ("accuracy_reward", "reasoning_accuracy_reward",
                                                         "think_format_reward")}
"""The short names ``trl grpo --reward_funcs`` takes, by the import path they name."""


def reward_names(script: RAPOScriptArguments) -> list[str]:
    """The recipe's reward functions: ``reward_funcs``, else ``reward``; TRL's short names as their import paths."""
    return [TRL_REWARDS.get(name, name) for name in name_list(script.reward_funcs, [script.reward])]


def _unknown(name: str) -> UsageError:
    from rapo_trl.cli.parsing import closest

    close = closest(name, [*REWARDS, *TRL_REWARDS])
    return UsageError(f"unknown reward '{name}'" + (f"; did you mean '{close}'?" if close else "")
                      + f"; choose one of {', '.join(REWARDS)}, TRL's {', '.join(TRL_REWARDS)}, or an import path "
                      "(pkg.module.fn)")


def check_reward_names(script: RAPOScriptArguments, columns=None) -> None:
    """Each reward a built-in or an import path whose module and function exist, read without importing them;
    with ``columns`` known (the data's), a function whose ``def`` is found gets its arguments checked too."""
    for name in reward_names(script):
        if name in REWARDS:
            continue
        if not is_import_path(name):
            raise _unknown(name)
        found = check_import_path(name, "reward")
        if found.parameters is not None and columns is not None:
            missing_columns(name, found.parameters, columns)


def missing_columns(name: str, parameters, columns) -> list[str]:
    """The columns reward ``name`` needs that the rows lack and the CLI adds (``solution``); any other required
    argument that no column provides is refused, naming it."""
    available = {*TRL_REWARD_ARGUMENTS, "environments", *columns}
    lacking = [parameter for parameter in parameters if parameter not in available]
    unknown = [parameter for parameter in lacking if parameter != SOLUTION]
    if unknown:
        raise UsageError(f"reward '{name}' requires the argument(s) {', '.join(map(repr, unknown))}, which no data "
                         f"column provides (TRL passes each column by name; the rows have {', '.join(sorted(columns))})")
    return lacking


def required_parameters(function) -> tuple[str, ...]:
    """The parameters ``function`` cannot be called without (as TRL calls it: all by keyword)."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return ()
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return tuple(name for name, parameter in signature.parameters.items()
                 if parameter.kind in kinds and parameter.default is inspect.Parameter.empty)


def make_reward(script: RAPOScriptArguments, name: str | None = None):
    """The reward function ``name`` (default: the recipe's ``reward``): a built-in name or an import path."""
    from rapo_trl import rewards

    name = TRL_REWARDS.get(name or script.reward, name or script.reward)
    table = {
        "rapo_outcome": rewards.rapo_outcome_reward,
        "f1": rewards.f1_reward,
        "exact_match": rewards.exact_match_reward,
        "math": rewards.math_equivalence_reward,
    }
    if name in table:
        return table[name]
    if is_import_path(name):
        function = import_object(name, "reward")
        if not callable(function):
            raise UsageError(f"reward '{name}' is not a function")
        return function
    raise _unknown(name)


def with_reward_columns(rows, functions: dict):
    """``rows`` with the columns the reward ``functions`` (name -> function) read and the rows lack: ``solution``
    (TRL's rewards' name for the gold answer) from the answer column; any other is refused, naming it."""
    added = {column for name, function in functions.items()
             for column in missing_columns(name, required_parameters(function), rows.column_names)}
    for column in sorted(added):
        rows = rows.add_column(column, list(rows["answer"]))
    return rows


def training_rewards(script: RAPOScriptArguments, reward_weights: list[float] | None) -> tuple[list, list[float] | None]:
    """The reward functions RL trains on and their ``reward_weights``: ``reward_funcs`` (or ``reward``), plus
    numeric closeness when ``closeness_weight`` > 0 (weights 1 and ``closeness_weight``)."""
    functions = [make_reward(script, name) for name in reward_names(script)]
    if not script.closeness_weight:
        if reward_weights is not None and len(reward_weights) != len(functions):
            raise UsageError(f"reward_weights has {len(reward_weights)} weights for {len(functions)} reward functions")
        return functions, reward_weights
    if reward_weights is not None:
        raise UsageError("set closeness_weight or reward_weights, not both (closeness_weight sets the weights)")
    from rapo_trl.rewards import numeric_closeness_reward

    return [*functions, numeric_closeness_reward], [1.0] * len(functions) + [script.closeness_weight]
