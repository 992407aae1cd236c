"""The trainer's side of TRL's ``environment_factory``: each row's JSON tools from its own environment, the prompts an
environment's rollouts queried the store with, and the pooled instances a late tool call may still change.

GRPOTrainer sets the environments up per step; the attributes read here are listed, and checked against the installed
TRL, in ``rapo_trl.internals``.
"""

from __future__ import annotations

from trl.data_utils import is_conversational

from rapo_trl.store.environment_build import row_question_id
from rapo_trl.trainer.step_state import RolloutHandOverError


def tools_per_row(trainer, prompts: list) -> list[dict] | None:
    """Each row's JSON tools by name, with an environment_factory: its own environment's methods and the standalone
    tools, as TRL set them up for this step (``None``: every row runs the engine's tools)."""
    if trainer.tool_protocol != "json" or trainer.environment_factories is None:
        return None
    if not is_conversational({"prompt": prompts[0]}):
        raise ValueError("JSON tool calls need conversational prompts (lists of chat messages), as TRL's tools do.")
    sync, asynchronous = trainer._sync_tool_dicts, trainer._async_tool_dicts
    if len(sync) != len(prompts):
        raise RolloutHandOverError(f"RAPO: {len(prompts)} prompts to roll out but TRL set up environments for "
                                   f"{len(sync)} rows: rollout_func ran outside _generate_and_score_completions.")
    return [{**own, **extra} for own, extra in zip(sync, asynchronous)]


def retire_overdue_environments(trainer) -> None:
    """TRL resets a step's environments for later steps. One whose call ran past ``json_tool_timeout`` and still runs
    would, when that call ends, change the environment a later row is given (its reward counting a call it never
    made): TRL's pool gets a fresh instance in its place. This step's rewards still read the row's own."""
    chat_tools = trainer.rollout_engine.chat_tools
    if chat_tools is None or not trainer.environments:
        return
    for environment, name in zip(trainer.environments, trainer._batch_environments, strict=True):
        if chat_tools.overdue_on(environment):
            pool = trainer._environment_pool[name]
            index = next(i for i, pooled in enumerate(pool) if pooled is environment)
            pool[index] = trainer.environment_factories[name]()


def rows_as_queried(trainer, inputs: list[dict], prompts: list) -> list[dict]:
    """The step's input rows with the prompts their rollouts queried the store with. An environment's rollouts
    queried it with the prompt after ``reset`` (its observation appended), as ``build_from_environment`` keys its
    records, so turns grown into the store are keyed by that prompt, not the row's. A row without a ``question_id``
    keeps the id of its own prompt, as ``build_from_environment`` names it, whatever ``reset`` showed."""
    if trainer.environment_factories is None:
        return inputs
    return [{**row, "prompt": prompt, "question_id": row_question_id(row)}
            for row, prompt in zip(inputs, prompts, strict=True)]
