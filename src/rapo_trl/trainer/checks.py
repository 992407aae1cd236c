"""The trainer's arguments checked, and warnings about a setup that runs but would not train what the user meant
(each said once)."""

from __future__ import annotations

import logging
import os
import re

from rapo_trl.core.retrieval_rule import RETRIEVAL_TRIGGERS
from rapo_trl.protocol import TOOL_TAGS

logger = logging.getLogger("rapo_trl.trainer")

PEFT_MIN_LEARNING_RATE = 1e-5
"""Below this a LoRA adapter barely moves in a short run (GRPOConfig's inherited default is 1e-6)."""


def check_something_trains(model) -> None:
    """A model without a trainable parameter is refused before training: every step would run, log a loss and change
    nothing. The usual cause is an adapter loaded with ``PeftModel.from_pretrained``, frozen unless
    ``is_trainable=True``."""
    if any(p.requires_grad for p in model.parameters()):
        return
    hint = (" PeftModel.from_pretrained loads an adapter frozen: pass is_trainable=True to train it."
            if hasattr(model, "peft_config") else " Unfreeze the parameters to train (requires_grad_(True)).")
    raise ValueError(f"RAPO: the model has no trainable parameter, so training would change nothing.{hint}")


def may_retrieve(args) -> bool:
    """Whether hybrid rows may retrieve at some step of ``retrieve_prob``'s schedule (a ramp from 0 included)."""
    return args.num_hybrid_generations > 0 and max(args.retrieve_prob, args.retrieve_prob_final or 0.0) > 0


def retrieval_off_reasons(args, store) -> list[str]:
    """Why no row ever retrieves with ``args`` and ``store`` (empty: hybrid rows may retrieve)."""
    reasons = []
    if args.num_hybrid_generations == 0:
        reasons.append("num_hybrid_generations=0")
    if max(args.retrieve_prob, args.retrieve_prob_final or 0.0) <= 0:
        final = "" if args.retrieve_prob_final is None else f" and retrieve_prob_final={args.retrieve_prob_final}"
        reasons.append(f"retrieve_prob={args.retrieve_prob}{final}")
    if store is None:
        reasons.append("no trace_store was given")
    return reasons


def warn_if_nothing_to_retrieve(args, store, dataset=None, tool_tags=None) -> None:
    """Hybrid rollouts are configured (at some step of ``retrieve_prob``'s schedule) but the store cannot feed them,
    cannot prefer the row's own question, or holds steps cut at other tools than the trainer's ``tool_tags``; or the
    rollouts can never reach a boundary where they retrieve. ``tool_tags``: the trainer's tag tools (``None``: not
    known here, or TRL's JSON tools)."""
    if not may_retrieve(args):
        return
    after_tool_steps_only = all(RETRIEVAL_TRIGGERS[name].boundary == "tool_step" for name in args.retrieve_at)
    if after_tool_steps_only and tool_tags is not None and not tool_tags:
        logger.warning("RAPO: hybrid rollouts retrieve after tool steps (retrieve_at=%s), but the trainer runs no "
                       "tool, so no row ever retrieves. Pass tools=[...], or retrieve at 'start' or 'plan'.",
                       list(args.retrieve_at))
    elif after_tool_steps_only and args.max_tool_calls == 0:
        # Every call gets the limit notice, which is no tool step (the engine's _run_tool_calls).
        logger.warning("RAPO: hybrid rollouts retrieve after tool steps (retrieve_at=%s), but max_tool_calls=0 runs "
                       "no tool call (each gets the limit notice, which is no tool step), so no row ever retrieves. "
                       "Raise max_tool_calls, or retrieve at 'start' or 'plan'.", list(args.retrieve_at))
    if args.retrieve_own_question and store is not None:
        warn_if_own_question_unknown(store, dataset)
    if store is not None and tool_tags:
        warn_if_store_cut_elsewhere(store, list(tool_tags))
    if store is not None and dataset is not None:
        warn_if_store_keyed_from_other_prompts(store, dataset)
    if store is None:
        schedule = "" if args.retrieve_prob_final is None else f", retrieve_prob_final={args.retrieve_prob_final}"
        logger.warning("RAPO: hybrid rollouts are configured (retrieve_prob=%s%s) but no trace_store was given: "
                       "nothing is retrieved and training is agentic GRPO. Pass trace_store=TraceStore(...) "
                       "built with build_from_agent / add_from_dataset, or set retrieve_prob=0.", args.retrieve_prob,
                       schedule)
    elif hasattr(store, "__len__") and len(store) == 0:
        logger.warning("RAPO: the trace store %r is empty: every retrieval will insert the fallback text, not "
                       "a retrieved step. Fill it first (TraceStore.build_from_agent, add_from_dataset or "
                       "`rapo build-store`).", store)
    else:
        warn_if_no_record_is_good_enough(store)


def warn_if_options_ignored(args, tool_protocol: str, store) -> None:
    """Options set to values that the rest of the setup leaves without effect: any option that acts only through
    retrieved steps while nothing is retrieved (``store``: the trainer's trace store), the retrieved-token loss's
    credit or shaping while its weight is 0, and ``score_retrieved_blocks`` with JSON tool calls, whose chat messages
    never hold a retrieved block."""
    from rapo_trl.config import RAPOConfig, retrieval_only_defaults

    off_because = " and ".join(retrieval_off_reasons(args, store))
    if off_because:
        # retrieve_prob_final=0 beside retrieve_prob=0 is named as a reason, not again as an ignored option.
        changed = [f"{name}={getattr(args, name)!r}" for name, default in retrieval_only_defaults().items()
                   if getattr(args, name) != default and f"{name}=" not in off_because]
        if changed:
            logger.warning("RAPO: retrieval is off (%s), so these options, which act only through retrieved steps, "
                           "have no effect: %s. Turn retrieval on, or leave them at their defaults.", off_because,
                           ", ".join(changed))
        return  # the checks below are about retrieval-only options too
    if not args.retrieved_token_loss_weight:
        defaults = RAPOConfig.__dataclass_fields__
        changed = [f"{name}={getattr(args, name)!r}" for name in ("retrieved_token_credit", "retrieved_token_shaping")
                   if getattr(args, name) != defaults[name].default]
        if changed:
            logger.warning("RAPO: %s set, but retrieved_token_loss_weight is 0, so there is no loss on retrieved "
                           "tokens for it to shape: it has no effect. Set retrieved_token_loss_weight > 0 to learn "
                           "the retrieved steps' tokens.", " and ".join(changed))
    if tool_protocol == "json" and args.score_retrieved_blocks:
        logger.warning("RAPO: score_retrieved_blocks=True, but with JSON tool calls the completions reward functions "
                       "get are the chat messages of the policy's turns and tool results, which never hold a "
                       "retrieved block: only completion_ids include them. Score retrieved text from completion_ids, "
                       "or leave score_retrieved_blocks off.")


def warn_if_no_record_is_good_enough(store) -> None:
    """A store retrieves only records whose reward is above its ``min_reward``: with none, every retrieval inserts
    the fallback text."""
    best, floor = getattr(store, "best_reward", None), getattr(getattr(store, "config", None), "min_reward", None)
    if best is None or floor is None:
        return
    try:
        best = best()
    except Exception:  # noqa: BLE001 - a store that does not answer now is the rollouts' outage handling's to meet
        return
    if best is not None and best <= floor:
        logger.warning("RAPO: every record of the trace store %r has a reward at or below its min_reward (%s; the "
                       "best is %s), so every retrieval will insert the fallback text. Set StoreConfig(min_reward=...) "
                       "below your rewards where the store is made, or fill it with better trajectories.", store, floor,
                       best)


def check_reward_scale(args, store) -> None:
    """With retrieval on, only TRL's ``scale_rewards="group"`` and ``multi_objective_aggregation="sum_then_normalize"``:
    RAPO's A = A_acc (1 + a A_ret) is the paper's, and ``core/reference.py``'s, on the weighted reward normalised by
    its group's std. TRL's ``normalize_then_sum`` normalises each reward function per group, then the sum over the
    whole batch, which is neither. Without retrieval the trainer is GRPOTrainer and takes every setting TRL offers."""
    if store is None or not may_retrieve(args):
        return
    if args.scale_rewards != "group":
        raise ValueError(f"scale_rewards={args.scale_rewards!r} is for GRPO without retrieval: with a trace_store and "
                         "hybrid rows, RAPO normalises rewards by their group's std; set scale_rewards='group'.")
    if args.multi_objective_aggregation != "sum_then_normalize":
        raise ValueError(f"multi_objective_aggregation={args.multi_objective_aggregation!r} is for GRPO without "
                         "retrieval: with a trace_store and hybrid rows, RAPO normalises the weighted sum of the rewards "
                         "by its group's std; set multi_objective_aggregation='sum_then_normalize'.")


def check_store_before_training(store) -> None:
    """A store that would retrieve wrongly (records without rewards, a damaged vector index) is refused before the
    first step (``TraceStore.check``), never found out by its retrievals; one that cannot be checked now (a server
    not answering) is left to the rollouts' outage handling."""
    from rapo_trl.store.errors import CorruptStoreError

    check = getattr(store, "check", None)
    if check is None:
        return
    try:
        check()
    except CorruptStoreError:
        raise
    except Exception as error:  # noqa: BLE001 - unreachable is not corrupt: the run may go on without retrieval
        logger.warning("RAPO: could not check the trace store %r before training (%s: %s); training starts, and "
                       "retrievals go on without it while it does not answer.", store, type(error).__name__, error)


def warn_if_store_cut_elsewhere(store, tool_tags: list[str]) -> None:
    """A store whose steps were cut at fewer tools than the trainer runs holds steps that span several of the
    rollout's tool calls: a hybrid row would be handed a later step (up to the final answer) after one call."""
    cut_at = getattr(store, "tool_tags", None)
    missing = [tag for tag in tool_tags if cut_at is not None and tag not in cut_at]
    if missing:
        logger.warning("RAPO: the trainer retrieves after every <%s> call, but the trace store's steps were cut at "
                       "%s only, so a stored step can run past a %s call (up to the final answer). Rebuild the store "
                       "with the trainer's tools: build_from_agent with an agent of these tools, or "
                       "add_from_dataset(..., tool_tags=%s).", ">, <".join(tool_tags),
                       ", ".join(f"</{tag}>" for tag in cut_at), ", ".join(f"<{tag}>" for tag in missing),
                       list(tool_tags))


def warn_if_own_question_unknown(store, dataset) -> None:
    """``retrieve_own_question`` needs each row's question id and a store that can restrict to it."""
    from rapo_trl.rollout.engine import takes_question_ids

    if not takes_question_ids(store):
        logger.warning("RAPO: retrieve_own_question is set but %s.select takes no question_ids: retrievals are "
                       "chosen by similarity alone. Give select a question_ids argument (TraceStore has one).",
                       type(store).__name__)
    columns = getattr(dataset, "column_names", None)
    if columns is not None and "question_id" not in columns:
        logger.warning("RAPO: retrieve_own_question is set but the training dataset has no question_id column: "
                       "retrievals are chosen by similarity alone. Add the ids the store was built with.")
    elif columns is not None and hasattr(store, "iter_batches") and len(store) > 0:
        from rapo_trl.store.agent import stored_question_ids

        if not stored_question_ids(store) & {str(i) for i in dataset["question_id"]}:
            logger.warning("RAPO: retrieve_own_question is set but no question_id of the trace store is a training "
                           "row's: every retrieval falls back to similarity over all records. Store trajectories "
                           "under their rows' question_id (to_rapo_rows adds one: rapo_trl.tasks.question_id_of of "
                           "the question text).")


SHARED_INSTRUCTIONS_MIN_CHARS = 64
"""Text this long that begins every first-step key or query is instructions, not part of a question."""


def warn_if_store_keyed_from_other_prompts(store, dataset, sample: int = 32) -> None:
    """A first-step query is the training prompt as the store reads prompts: a conversation without its system
    messages, a plain-text prompt whole, instructions and all. When every query begins with instructions that no
    first-step key holds (plain-text rows, a store built from conversations), or every key with instructions no query
    holds (the other way round), the question is a small part of what is compared and retrieval finds other
    questions' steps."""
    from rapo_trl.store.steps import prompt_text

    if not (hasattr(store, "collection") and hasattr(store, "preprocess")):
        return
    try:
        prompts = [dataset[i]["prompt"] for i in range(min(sample, len(dataset)))]
        queries = [store.preprocess(prompt_text(prompt) + "\n") for prompt in prompts]
        keys = store.collection.get(where={"step_index": 0}, limit=sample, include=["documents"])["documents"]
    except Exception:  # noqa: BLE001 - a streaming dataset or an unreachable store: the store's own checks speak
        return
    if len(queries) < 2 or len(keys) < 2:
        return
    for texts, others, whose, built in ((queries, keys, "training prompt", "from prompts without them"),
                                        (keys, queries, "first-step key of the store", "from prompts with them")):
        shared = os.path.commonprefix(texts)[:SHARED_INSTRUCTIONS_MIN_CHARS]
        if len(shared) == SHARED_INSTRUCTIONS_MIN_CHARS and not any(shared in other for other in others):
            logger.warning("RAPO: every %s begins with the same instructions (%r...), which the other side of the "
                           "retrieval lacks: the store was built %s (a conversation's system messages stay out of "
                           "keys and queries; a plain-text prompt is read whole). Retrieval then compares the "
                           "instructions, not the questions, and finds other questions' steps. Build the store from "
                           "rows of the training rows' form, or cut the instructions from keys and queries with "
                           "StoreConfig(system_prompt=<the instructions>).", whose, shared[:40], built)
            return


def warn_if_learning_rate_too_low_for_peft(model, learning_rate: float) -> None:
    if hasattr(model, "peft_config") and learning_rate < PEFT_MIN_LEARNING_RATE:
        logger.warning(
            "RAPO: a PEFT adapter is training at learning_rate=%g; adapters barely move below %g in a short run "
            "(GRPOConfig's default 1e-6 is meant for full fine-tuning). LoRA usually wants ~1e-4: set "
            "RAPOConfig(learning_rate=...).", learning_rate, PEFT_MIN_LEARNING_RATE,
        )


def warn_if_prompt_and_tools_differ(dataset, tool_tags: list[str]) -> None:
    """The first training prompt should teach exactly the tag tools the trainer runs: the built-in ones (``<python>``,
    ``<search>``) and function tools (``<name>{...}</name>``, as ``to_rapo_rows`` teaches them)."""
    try:
        prompt = dataset[0]["prompt"]
    except (TypeError, KeyError, IndexError, NotImplementedError):  # streaming or unusual datasets: no check
        return
    text = _system_text(prompt)
    taught = taught_tool_tags(text, tool_tags)
    running = set(tool_tags)
    for tag in sorted(taught - running):
        logger.warning("RAPO: the training prompts teach <%s> but the trainer runs no %s tool, so every such call "
                       "fails. Build the rows with to_rapo_rows(..., tools=<the tools you pass>) or add the tool.",
                       tag, tag)
    missing = sorted(running - taught)
    if missing and not taught:
        logger.warning("RAPO: the trainer runs %s, but the training prompts teach no tool tag: the policy calls a "
                       "tool only if it already writes its tags. Build the rows with to_rapo_rows(..., tools=<the "
                       "tools you pass>) or put rapo_trl.tasks.system_prompt_for(tools) in a system message.",
                       ", ".join(f"<{tag}>" for tag in missing))
        return
    for tag in missing:
        logger.warning("RAPO: the trainer runs a <%s> tool that the training prompts never mention. Build the rows "
                       "with to_rapo_rows(..., tools=<the tools you pass>).", tag)


_FUNCTION_CALL_RE = re.compile(r"<([A-Za-z_][\w.-]*)>\{")
"""A function tool's call as ``system_prompt_for`` teaches it: ``<name>{"arg": ...}</name>``."""


def taught_tool_tags(text: str, tool_tags: list[str]) -> set[str]:
    """The tool tags ``text`` teaches: built-in tags it names, function tools whose call format it shows, and any of
    ``tool_tags`` it names."""
    named = {tag for tag in (*TOOL_TAGS, *tool_tags) if f"<{tag}>" in text}
    return named | set(_FUNCTION_CALL_RE.findall(text))


def _system_text(prompt) -> str:
    """A conversation's system messages; a plain-text prompt as a whole (its instructions are inline)."""
    if isinstance(prompt, list):
        return "\n".join(str(m.get("content", "")) for m in prompt if isinstance(m, dict) and m.get("role") == "system")
    return str(prompt)


def checked_arguments(model, args, train_dataset, **refused):
    """``args`` (a default RAPOConfig named after the model when ``None``), refusing what RAPO cannot take:
    GRPOTrainer's own rollout hooks (``refused``), another config class, a push to the Hub that cannot happen,
    dynamic sampling over an iterable dataset."""
    from trl.trainer.utils import get_config_model_id

    from rapo_trl.config import RAPOConfig

    for name, value in refused.items():
        if value is not None:
            raise ValueError(
                f"RAPOTrainer does not take {name}=: its step-wise hybrid rollout (tools, retrieval, per-step "
                "entropies) is the rollout function. Pass tools=[...] or environment_factory= and trace_store= "
                f"instead, or use GRPOTrainer for a custom {name}."
            )
    if args is None:
        model_name = model if isinstance(model, str) else get_config_model_id(model.config)
        args = RAPOConfig(f"{str(model_name).rstrip('/').split('/')[-1]}-RAPO")
    if not isinstance(args, RAPOConfig):
        raise TypeError(
            f"RAPOTrainer needs a RAPOConfig, got {type(args).__name__}. RAPOConfig takes every GRPOConfig "
            "field under the same name (with RAPO's defaults for loss_type, epsilon_high, delta and beta)."
        )
    if args.push_to_hub:
        from rapo_trl.hub_access import push_problem

        problem = push_problem(args.hub_token, "push once trained with trainer.push_to_hub()")
        if problem:  # transformers' Trainer would find out once the model has loaded
            raise ValueError(problem)
    if args.dynamic_sampling_max_rounds and not (hasattr(train_dataset, "__len__") and hasattr(train_dataset, "__getitem__")):
        raise ValueError("dynamic sampling draws replacement prompts by index: it needs a map-style "
                         "train_dataset (a datasets.Dataset, not an IterableDataset).")
    return args


def check_user_vllm(args, vllm_llm) -> None:
    """A ``vllm_llm`` the user passes samples outside TRL's vLLM path (``use_vllm`` is off), so GRPOTrainer's
    ``vllm_importance_sampling_correction`` (on by default) never applies: the loss would treat the engine's samples
    as the policy's own. Both are refused, rather than one dropped, until the user says which they mean."""
    if vllm_llm is None:
        return
    if args.use_vllm:
        raise ValueError("RAPOTrainer got vllm_llm= and use_vllm=True: two vLLM engines. Pass vllm_llm= with "
                         "use_vllm=False, or drop vllm_llm= to generate on the trainer's colocated engine.")
    if args.vllm_importance_sampling_correction:
        raise ValueError("RAPOTrainer(vllm_llm=...) generates outside TRL's vLLM path, so TRL's "
                         "vllm_importance_sampling_correction (on by default) is not applied to its samples. Set "
                         "vllm_importance_sampling_correction=False to train on them uncorrected, or generate with "
                         "use_vllm=True (the trainer's colocated engine, corrected).")


def warn_on_lost_signal(monitor, rows, rewards, group_size: int, accelerator) -> None:
    """Once each: flat groups or truncated rollouts for several steps; a step whose every tool call failed. Judged
    over every process's rows (the tool calls and errors gathered too: one process's rows failing is not the step's
    every call) and said once, by the main process. Every process calls it (it gathers)."""
    import torch
    from accelerate.utils import gather_object

    truncated = accelerator.gather(torch.tensor([float(r.truncated) for r in rows], device=accelerator.device))
    messages = monitor.update(rewards.nan_to_num(nan=0.0).tolist(), group_size, truncated.bool().tolist())
    calls = accelerator.gather(torch.tensor([sum(r.tool_calls for r in rows)], device=accelerator.device))
    errors = [e for r in rows for e in r.tool_errors]
    if accelerator.num_processes > 1:
        errors = [tuple(e) for e in gather_object(errors)]
    messages += monitor.update_tools(int(calls.sum()), errors)
    if accelerator.is_main_process:
        for message in messages:
            logger.warning("RAPO: %s", message)
