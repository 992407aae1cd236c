"""``rapo eval``'s scoring of its models on every eval set: one model after another in this process, or several at
once, each in a process of its own (``eval_processes``), which on a CPU with spare cores scores them in a fraction of
the time: one model's decoding is bound by its Python loop more than by the cores it is given."""

from __future__ import annotations

from rapo_trl.cli.common import (
    build_tools,
    eval_splits,
    load_policy,
    model_init_kwargs,
    name_list,
    training_rows,
)
from rapo_trl.evaluation import set_scoring

MODEL_NAMES = ("base", "warm_start", "sft_on_store", "sft_same_time", "grpo_same_rollouts", "trained")
"""The models ``rapo eval`` may score, by name, in the order it scores them; ``eval_sampled_models`` picks among
them."""


def eval_sets(script, tools) -> dict:
    """``set name -> rows``: the questions of every eval set, the same in every process."""
    return {name: training_rows(script, name, tools) for name in eval_splits(script)}


def sampling(script, rapo_args) -> dict:
    """mean@k's settings: k samples (0: greedy pass@1 only) of ``eval_sample_size`` questions, seeded, sampled as the
    recipe's training rollouts are (its top_p, top_k, min_p, repetition penalty and ``generation_kwargs``) at the eval
    temperature (training's unless ``eval_temperature`` is set)."""
    from rapo_trl.evaluation import sampled_settings
    from rapo_trl.trainer.backend import sampling_settings

    trained = sampling_settings(rapo_args)  # the trainer's own reading of the recipe, generation_kwargs included
    temperature = trained.temperature if script.eval_temperature is None else script.eval_temperature
    settings = sampled_settings(temperature, trained.top_p, trained.top_k, trained.min_p, trained.repetition_penalty,
                                trained.extra)
    return dict(samples=script.eval_samples, sample_questions=script.eval_sample_size, seed=rapo_args.seed,
                **settings)


def score_model(script, rapo_args, model_args, name: str, path: str, sets: dict, tools) -> tuple[dict, dict]:
    """One model on every set: ``({set: metrics}, {set: its first three texts})``; mean@k where ``name`` and the set
    are among the sampled ones, greedy pass@1 everywhere."""
    from trl import get_quantization_config

    load = dict(quantization_config=get_quantization_config(model_args), **model_init_kwargs(model_args, rapo_args))
    model, tokenizer = load_policy(path, device=script.device, **load)  # once per model, for every set
    sampled_sets = name_list(script.eval_sampled_splits, sets)
    sampled_models = name_list(script.eval_sampled_models, MODEL_NAMES)
    metrics_by_set, texts_by_set = {}, {}
    for set_name, rows in sets.items():
        settings = sampling(script, rapo_args)
        if name not in sampled_models or set_name not in sampled_sets:
            settings["samples"] = 0
        numeric = set_scoring(script.eval_scoring, script.task, rows["answer"]) == "math"
        metrics = score_loaded(model, tokenizer, rows, tools, rapo_args, script.eval_batch_size, numeric,
                               f"eval {name} on {set_name}", **settings)
        texts_by_set[set_name] = metrics.pop("texts")[:3]
        metrics_by_set[set_name] = metrics
    return metrics_by_set, texts_by_set


def score_loaded(model, tokenizer, rows, tools, rapo_args, batch_size: int, numeric: bool, desc: str,
                 **settings) -> dict:
    """A loaded model's scores on ``rows`` with the recipe's rollout budget (its token budgets, tool calls, result
    cut and stop text, as training rolled out) and its prompts rendered as training rendered them (the recipe's
    ``chat_template_kwargs``); see `rapo_trl.evaluation.evaluate_policy`."""
    from rapo_trl.evaluation import evaluate_policy

    return evaluate_policy(
        model, tokenizer, rows, tools, max_completion_length=rapo_args.max_completion_length,
        max_turn_tokens=rapo_args.max_turn_tokens, max_tool_calls=rapo_args.max_tool_calls,
        max_result_chars=rapo_args.max_tool_result_chars, answer_stop=rapo_args.answer_stop, numeric=numeric,
        batch_size=batch_size, desc=desc, chat_template_kwargs=rapo_args.chat_template_kwargs, **settings,
    )


def score_models(script, rapo_args, model_args, models: dict[str, str], sets: dict, tools) -> dict[str, tuple]:
    """``name -> score_model(...)`` for every model of ``models`` (``name -> folder``), in their order: one after
    another here (one model in memory at a time), or ``eval_processes`` at once, each process with an equal share of
    this one's torch threads and one model at a time."""
    processes = min(script.eval_processes, len(models))
    if processes <= 1:
        return {name: score_model(script, rapo_args, model_args, name, path, sets, tools)
                for name, path in models.items()}
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from rapo_trl.hardware import threads_per_process

    threads = threads_per_process(processes)
    print(f"Scoring {len(models)} models in {processes} processes, {threads} torch thread(s) each.")
    # spawn: a fork would copy this process's torch and tokenizer threads' state into the children
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(processes, mp_context=context, initializer=_use_threads, initargs=(threads,)) as pool:
        futures = {name: pool.submit(_score_in_this_process, script, rapo_args, model_args, name, path)
                   for name, path in models.items()}
        return {name: future.result() for name, future in futures.items()}


def _use_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def _score_in_this_process(script, rapo_args, model_args, name: str, path: str) -> tuple[dict, dict]:
    """:func:`score_model` in a worker process: the tools and the sets are made again here, from the recipe."""
    tools = build_tools(script)
    return score_model(script, rapo_args, model_args, name, path, eval_sets(script, tools), tools)
