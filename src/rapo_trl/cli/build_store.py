"""``rapo build-store``: an off-policy agent solves the training questions; its best steps fill the store."""

from __future__ import annotations

import json
import logging
import random
from concurrent.futures import ThreadPoolExecutor

from rapo_trl.cli.common import (
    DEMO_TASKS,
    UsageError,
    build_tools,
    check_model,
    check_quantization,
    check_store_location,
    count_line,
    load_policy,
    model_init_kwargs,
    open_store,
    resolve_model_path,
    task_split,
    training_rows,
    warm_start_collection,
)
from rapo_trl.cli.environment import check_environment
from rapo_trl.cli.rewards import reward_names, training_rewards, with_reward_columns

logger = logging.getLogger(__name__)


def _expert_agent(script, rows, tools):
    from rapo_trl.tasks import get_task

    if script.task not in ("arithmetic", "word_problems", "two_hop"):
        raise ValueError(f"the scripted expert exists only for the demo tasks, not task={script.task}")
    expert = get_task(script.task).expert
    by_prompt = {json.dumps(row["prompt"]): row for row in rows}
    rngs: dict[str, random.Random] = {}
    tool_map = {tool.tag: tool for tool in tools}

    def agent(prompt):
        key = json.dumps(prompt)
        # One generator per question, seeded from it: a resumed build (which skips the questions
        # already stored) draws for each remaining question exactly what a full build would.
        rng = rngs.setdefault(key, random.Random(f"{script.task_seed}:{key}"))
        return expert(by_prompt[key], error_rate=script.expert_error_rate, rng=rng, tools=tool_map)

    return agent


def check(script, rapo_args, model_args) -> None:
    """Every input build-store can check without loading anything (also before TRL is imported), beyond the
    script's own arguments, which `read_recipe` checked as it read them."""
    check_environment(script, "build-store")
    if script.environment_factory is None or script.reward_funcs is not None:
        training_rewards(script, rapo_args.reward_weights)  # an unknown name or a weight count refused before loading
    check_store_location(script, must_exist=False)
    if script.agent == "expert" and script.task not in DEMO_TASKS:
        raise UsageError(f"agent=expert is the scripted expert of the demo tasks ({', '.join(DEMO_TASKS)}); for "
                         f"task={script.task} give a model as the agent (a folder or a hub id)")
    if script.agent != "expert":
        check_model(script.agent)  # model_revision pins the policy's repo, not the agent's
        check_quantization(model_args)


def _agent_model(script, rapo_args, model_args):
    """``(model, tokenizer)`` of ``script.agent``, loaded with the recipe's ModelConfig flags."""
    from trl import get_quantization_config

    # The agent is another repo than the policy: the policy's model_revision does not apply to it.
    init_kwargs = {k: v for k, v in model_init_kwargs(model_args, rapo_args).items() if k != "revision"}
    return load_policy(resolve_model_path(script.agent), device=script.device,
                       quantization_config=get_quantization_config(model_args), **init_kwargs)


def _model_agent(script, rapo_args, model_args, tools):
    """The off-policy agent ``script.agent`` names, loaded with the recipe's ModelConfig flags."""
    from rapo_trl.rollout.agent import RolloutAgent
    from rapo_trl.rollout.engine import RolloutConfig
    from rapo_trl.trainer.backend import sampling_settings

    model, tokenizer = _agent_model(script, rapo_args, model_args)
    # The recipe's whole rollout budget, as training and eval roll out: a question needing more tool calls than
    # RolloutConfig's default would be stored cut short.
    config = RolloutConfig(max_completion_length=rapo_args.max_completion_length,
                           max_turn_tokens=rapo_args.max_turn_tokens, max_tool_calls=rapo_args.max_tool_calls,
                           max_result_chars=rapo_args.max_tool_result_chars, answer_stop=rapo_args.answer_stop)
    # Its prompts rendered as RL renders the policy's: the store is keyed by, and the warm start imitates, what
    # follows them. Sampled as the trainer samples (top_p, top_k, ..., generation_kwargs): the steps the store holds
    # come from the distribution the policy trains with.
    return RolloutAgent(model, tokenizer, tools, config, sampling_settings(rapo_args),
                        chat_template_kwargs=rapo_args.chat_template_kwargs)


def _check_holds_only(store, rows, source: str, split: str) -> None:
    """Refuse a collection that already holds this agent's traces of questions outside ``rows``: a resume would add
    to it, and retrieval (or the warm start) would find an earlier build's questions, e.g. the demonstrated stories'
    of a store made before store_split. Every build path runs it, an environment's too, before its agent rolls out."""
    from rapo_trl.store.agent import stored_question_ids

    others = stored_question_ids(store, source) - set(rows["question_id"])  # the ids build_from_agent stores
    if others:
        raise UsageError(f"collection '{store.collection_name}' at {store.location} already holds {source}'s traces of "
                         f"{len(others)} questions that are not of split {split!r} (an earlier build from another "
                         "split or size?); delete the store folder or set another store_path")


def _fill(script, rapo_args, agent, rows, reward, store, split: str, what: str, tool_tags) -> dict:
    """``store`` (a collection) filled with ``agent(rows)``'s best trajectories of ``rows``; returns what it added and
    holds."""
    source = f"agent:{script.agent}"
    _check_holds_only(store, rows, source, split)
    added = store.build_from_agent(
        agent(rows), rows, reward, num_samples=script.num_samples, keep_top_k=script.keep_top_k,
        source=source, seed=rapo_args.seed, tool_tags=tool_tags,  # a step per call of any tool training runs
    )
    stats = store.stats()
    print(f"Added {added} step records; {what} now holds {stats['records']} records "
          f"from {stats['questions']} questions at {store.location}.")
    _check_stored_some(script, store, rows, source, what)
    return {"added": added, **stats}


def _check_stored_some(script, store, rows, source: str, what: str) -> None:
    """Refuse a build after which ``store`` holds no record of ``source`` for any of ``rows``' questions (neither this
    build nor an earlier one it resumed stored one). Another source's records, or this agent's of other questions,
    do not count: training would still retrieve only the fallback text for these questions."""
    from rapo_trl.store.agent import stored_question_ids

    if not stored_question_ids(store, source) & set(rows["question_id"]):
        raise UsageError(_nothing_stored(script, what, len(rows)))


def _nothing_stored(script, what: str, questions: int) -> str:
    """The one line for a build that left ``what`` without a record of its questions: training would retrieve only
    the fallback text."""
    return (f"{what} got no step records from agent {script.agent!r} on {questions} questions: its trajectories were "
            "all empty, untagged or without a finite reward, so nothing can be retrieved. Check the agent's output "
            "(its tool tags and <answer>) and the reward")


def run(script, rapo_args, model_args, *, checked: bool = False) -> dict:
    """``checked``: `check` has passed these inputs already, as the ``rapo`` command checks them before TRL imports;
    checking again would look the store and the agent model up a second time."""
    if not checked:
        check(script, rapo_args, model_args)  # before a model agent loads
    if script.environment_factory is not None:
        return _fill_from_environment(script, rapo_args, model_args)
    tools = build_tools(script)
    tags = [tool.tag for tool in tools]
    from rapo_trl.rewards import combine_rewards
    from rapo_trl.trainer.rewards import bind_tool_tags

    reward_funcs, reward_weights = training_rewards(script, rapo_args.reward_weights)
    # The trajectories are ranked by what RL will reward: every training reward, weighted as training weights them,
    # and given the tools' tags as the trainer gives them (a tag of no tool the recipe runs is text, not a call).
    reward = combine_rewards(bind_tool_tags(reward_funcs, tags), reward_weights)

    def rows_of(role):  # the prompts training uses, so a model agent sees the same
        return with_reward_columns(training_rows(script, role, tools), dict(zip(reward_names(script), reward_funcs)))

    roles = ["store"]
    # A store of other questions than the warm start's (store_split): the warm start's trajectories are made by the
    # same agent, with the same sampling and selection, into a collection of their own (see warm_start_collection).
    if script.sft_warmup_steps > 0 and warm_start_collection(script) != script.store_collection:
        roles.append("demo")
    sets = {role: rows_of(role) for role in roles}
    print(count_line("Building the store from", script, {task_split(script, r): rows for r, rows in sets.items()}))
    if script.agent == "expert":
        def agent(rows):  # the scripted expert answers the rows it is given
            return _expert_agent(script, rows, tools)
    else:
        model = _model_agent(script, rapo_args, model_args, tools)  # loaded once, for both collections

        def agent(rows):
            return model
    fills = {"store": (script.store_collection, "the store")}
    if "demo" in sets:
        name = warm_start_collection(script)
        fills["demo"] = (name, f"the warm start's collection '{name}'")

    # Opened here, one after the other: Chroma's client for a folder is made once per process, not under a lock.
    stores = {role: open_store(script, must_exist=False, collection=collection)
              for role, (collection, _) in fills.items()}

    def fill(role):
        what = fills[role][1]
        return _fill(script, rapo_args, agent, sets[role], reward, stores[role], task_split(script, role), what, tags)

    if script.agent == "expert" and len(fills) > 1:
        # The scripted expert's time is its sandboxed tool calls and the embedder, both outside the GIL: its two
        # collections fill at once, one thread each (writes to the folder take the process's one writer lock). A model
        # agent fills them one after the other, its generation having the cores to itself.
        with ThreadPoolExecutor(max_workers=len(fills), thread_name_prefix="build-store") as pool:
            filled = dict(zip(fills, pool.map(fill, fills)))
    else:
        filled = {role: fill(role) for role in fills}
    result = filled["store"]
    if "demo" in filled:
        result["warm_start"] = filled["demo"]
    return result


def _environment_agent(script, rapo_args, model_args):
    """``script.agent`` acting on the recipe's environment with the recipe's rollout budget and sampling settings, its
    prompts and tool results rendered with the recipe's ``chat_template_kwargs``, as RL renders the policy's."""
    from rapo_trl.cli.environment import environment_factory
    from rapo_trl.rollout.engine import RolloutConfig
    from rapo_trl.rollout.environment_agent import EnvironmentAgent
    from rapo_trl.trainer.backend import sampling_settings

    model, tokenizer = _agent_model(script, rapo_args, model_args)
    config = RolloutConfig(max_completion_length=rapo_args.max_completion_length,
                           max_turn_tokens=rapo_args.max_turn_tokens, max_tool_calls=rapo_args.max_tool_calls,
                           json_tool_timeout=rapo_args.json_tool_timeout,
                           max_result_chars=rapo_args.max_tool_result_chars,
                           chat_template_kwargs=dict(rapo_args.chat_template_kwargs or {}))
    return EnvironmentAgent(model, tokenizer, environment_factory(script),
                            build_tools(script) if script.tools is not None else (), config,
                            sampling_settings(rapo_args))  # as the model agent: as the trainer samples


def _fill_from_environment(script, rapo_args, model_args) -> dict:
    """The store filled by ``script.agent`` acting on the environment, one fresh environment per rollout, scored by
    ``get_reward`` and any ``--reward_funcs``; keyed as the policy's hybrid rollouts on it query the store."""
    from rapo_trl.cli.environment import environment_rewards, environment_rows
    from rapo_trl.store import build_from_environment

    split = task_split(script, "store")
    rows = environment_rows(script, "store")
    print(count_line("Building the store from", script, {split: rows}))
    reward_funcs, reward_weights = environment_rewards(script, rapo_args.reward_weights)
    store = open_store(script, must_exist=False)
    source = f"agent:{script.agent}"
    _check_holds_only(store, rows, source, split)  # before the agent's model loads
    agent = _environment_agent(script, rapo_args, model_args)
    added = build_from_environment(store, agent, rows, reward_funcs, num_samples=script.num_samples,
                                   keep_top_k=script.keep_top_k, source=source, reward_weights=reward_weights)
    stats = store.stats()
    print(f"Added {added} step records; the store now holds {stats['records']} records from {stats['questions']} "
          f"questions at {store.location}.")
    _check_stored_some(script, store, rows, source, "the store")
    return {"added": added, **stats}
