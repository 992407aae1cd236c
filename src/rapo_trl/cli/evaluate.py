"""``rapo eval``: pass@1 with a 95% interval (plus F1 / EM) with tools and without retrieval.

Side by side on the same eval questions: the base model, then those ``rapo train`` made beside the trained model (the
SFT warm start, SFT on the store, the equal-time SFT baseline, the GRPO baseline), and the trained model.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from rapo_trl.cli.common import (
    GRPO_SAME_ROLLOUTS_DIR,
    MODEL_ALIASES,
    UsageError,
    build_tools,
    check_model,
    check_quantization,
    count_line,
    eval_splits,
    load_policy,
    name_list,
    resolve_model_path,
    tool_names,
    write_json,
)
from rapo_trl.cli.model_folder import model_folder_problem
from rapo_trl.cli.model_scoring import (  # noqa: F401 - MODEL_NAMES is re-exported
    MODEL_NAMES,
    eval_sets,
    sampling,
    score_loaded,
    score_models,
)
from rapo_trl.cli.run_record import (
    RUN_ID_FILE,
    baseline_run_id,
    read_run_record,
    refuse_trained_questions,
    refuse_unfinished_run,
    refuse_what_eval_cannot_run,
    use_trained_tools,
)
from rapo_trl.cli.training_report import training_steps, training_table
from rapo_trl.cli.warm_start import SFT_HISTORY_FILE, SFT_ON_STORE_DIR, SFT_SAME_TIME_DIR, WARM_START_DIR
from rapo_trl.evaluation import (  # noqa: F401 - NUMERIC_TASKS and SAMPLING_DEFAULTS are re-exported
    NUMERIC_TASKS,
    SAMPLING_DEFAULTS,
    SCORINGS,
    distinct_question_rows,
    format_table,
    sampling_label,
    set_scoring,
)
from rapo_trl.plots import STATE_FILE

BASELINE_FOLDERS = {"warm_start": WARM_START_DIR, "sft_on_store": SFT_ON_STORE_DIR, "sft_same_time": SFT_SAME_TIME_DIR,
                    "grpo_same_rollouts": GRPO_SAME_ROLLOUTS_DIR}
"""The models ``rapo train`` leaves inside its output_dir beside the trained one, by name."""
FINISHED_MARKERS = {"warm_start": SFT_HISTORY_FILE, "sft_on_store": SFT_HISTORY_FILE,
                    "sft_same_time": SFT_HISTORY_FILE, "grpo_same_rollouts": STATE_FILE}
"""The file ``rapo train`` writes in each baseline's folder after its model: a run stopped before it leaves a folder
without it (a half-saved model, or checkpoints alone)."""

logger = logging.getLogger("rapo_trl.cli")


def _base_of(path: str) -> str | None:
    config = Path(path) / "adapter_config.json"
    if config.exists():
        return json.loads(config.read_text()).get("base_model_name_or_path")
    return None


def evaluate_model(path: str, rows, tools, rapo_args, batch_size: int, device: str | None = None,
                   numeric: bool = False, desc: str = "eval", load: dict | None = None, **sampling) -> dict:
    """Scores of the model (or adapter) folder ``path``, loaded with ``load`` (`load_policy`'s keyword
    arguments); see `rapo_trl.evaluation.evaluate_policy`."""
    model, tokenizer = load_policy(path, device=device, **(load or {}))
    return score_loaded(model, tokenizer, rows, tools, rapo_args, batch_size, numeric, desc, **sampling)


def models_to_evaluate(script, model_args, target: str) -> dict[str, str]:
    """``name -> folder``: base, warm start, SFT on the store, equal-time SFT, the GRPO baseline (those that exist),
    then the trained model."""
    models: dict[str, str] = {}
    record = read_run_record(target) or {}
    if script.eval_base:
        base = model_args.model_name_or_path and resolve_model_path(model_args.model_name_or_path,
                                                                     model_args.model_revision)
        base = base or _base_of(target) or _recorded_base(script, target, record.get("base_model"))
        if base:
            models["base"] = base
    made = record.get("baselines")  # None: a run recorded before train listed them
    run_id = record.get("run_id")  # None: a run recorded before train stamped its baselines
    for name, folder in BASELINE_FOLDERS.items():
        path = Path(target) / folder
        if made is not None and name in made and path.is_dir() and not (path / FINISHED_MARKERS[name]).is_file():
            logger.warning("rapo eval: %s is left out: the run that trained %s stopped before it finished its %s "
                           "baseline (no %s in the folder, written once the model is saved).", path, target, name,
                           FINISHED_MARKERS[name])
            continue
        # a merged model (config.json) or a LoRA adapter over the warm start (adapter_config.json)
        if any((path / f).exists() for f in ("config.json", "adapter_config.json")):
            if made is not None and name not in made:
                logger.warning("rapo eval: %s is left out: the run that trained %s made no %s (the folder is an "
                               "earlier run's in the same output_dir).", Path(target) / folder, target, name)
                continue
            stamped = baseline_run_id(path)
            if run_id is not None and stamped != run_id:
                logger.warning("rapo eval: %s is left out: the run that trained %s (run %s) did not finish this %s "
                               "baseline (its %s names %s): the folder is an earlier run's in the same output_dir, "
                               "or this run stopped while it made it again.", path, target, run_id, name,
                               RUN_ID_FILE, f"run {stamped}" if stamped else "no run")
                continue
            models[name] = str(Path(target) / folder)
    models["trained"] = target
    if script.eval_models is not None:  # the ones asked for, in scoring order
        models = {name: path for name, path in models.items() if name in name_list(script.eval_models, [])}
    return models


def _recorded_base(script, target: str, recorded: str | None) -> str | None:
    """The base the run that trained ``target`` recorded, for a model trained whole (its weights name no base); None
    where there is none or it cannot load here, said in one line when the base is to be scored."""
    if script.eval_model in MODEL_ALIASES:  # the smoke test scores an untrained model: no base to compare it with
        return None
    problem = None
    if recorded is None:
        problem = f"the base model is left out: {target} names no base (no adapter, no base in a run record)"
    else:
        try:
            check_model(recorded)
        except UsageError as error:
            problem = f"the base model {recorded} that trained {target} is left out: {error}"
    if problem is None:
        return recorded
    if script.eval_models is None or "base" in name_list(script.eval_models, []):
        logger.warning("rapo eval: %s; pass --model_name_or_path to score the base.", problem)
    return None


def _target(script, rapo_args) -> str:
    # TrainingArguments' own default ("trainer_output") is set in __post_init__, after this early check runs.
    return script.eval_model or rapo_args.output_dir or "trainer_output"


def check_sampling_settings(script) -> None:
    """Refuse eval's counts and temperature where they would fail after a model loads, or score nothing as 0."""
    if script.eval_samples < 0:
        raise UsageError(f"eval_samples must be >= 0 (0: greedy pass@1 only), got {script.eval_samples}")
    if script.eval_processes < 1:
        raise UsageError(f"eval_processes must be >= 1 (1: one model after another), got {script.eval_processes}")
    if script.eval_batch_size < 1:
        raise UsageError(f"eval_batch_size must be >= 1 (rows generated together), got {script.eval_batch_size}")
    if script.eval_sample_size is not None and script.eval_sample_size < 1:
        # 0 questions would report mean@k as 0.000 with an interval of 0.000-0.000
        raise UsageError(f"eval_sample_size must be >= 1 (questions scored by mean@k; unset: eval_size), got "
                         f"{script.eval_sample_size}")
    if script.eval_temperature is not None and script.eval_temperature <= 0:
        raise UsageError(f"eval_temperature must be > 0 (mean@k samples at it; eval_samples 0 scores greedily), got "
                         f"{script.eval_temperature}")
    check_sampled_names(script)
    if script.eval_scoring not in SCORINGS:
        raise UsageError(f"eval_scoring must be one of {', '.join(SCORINGS)}, got {script.eval_scoring!r}")


def check_sampled_names(script) -> None:
    """Refuse a name in ``eval_models``, ``eval_sampled_models`` or ``eval_sampled_splits`` that is no model or eval
    set: it would be left out of every table without a word."""
    for field, known, scored in (("eval_models", MODEL_NAMES, "scored"),
                                 ("eval_sampled_models", MODEL_NAMES, "scored by mean@k"),
                                 ("eval_sampled_splits", eval_splits(script), "scored by mean@k")):
        unknown = [name for name in name_list(getattr(script, field), []) if name not in known]
        if unknown:
            raise UsageError(f"{field} names {', '.join(map(repr, unknown))}, not one of {', '.join(known)}: "
                             f"no model or set by that name would be {scored}")
    if script.eval_models is not None and not name_list(script.eval_models, []):
        raise UsageError("eval_models is empty: name at least one model to score (e.g. trained)")


def check(script, rapo_args, model_args) -> None:
    """Every input eval can check without loading anything (also before TRL is imported), beyond the script's
    own arguments, which `read_recipe` checked as it read them."""
    check_sampling_settings(script)
    if script.eval_report and Path(script.eval_report).suffix.lower() == ".md":
        # the table is written beside the JSON as <eval_report>.md: here that is the JSON's own path
        raise UsageError(f"eval_report {script.eval_report!r} ends in .md: name the JSON file (e.g. report.json); "
                         "its markdown table is written beside it as report.md")
    if script.eval_model in MODEL_ALIASES:
        check_model(script.eval_model)
    elif not Path(_target(script, rapo_args)).is_dir():
        raise UsageError(f"eval model '{_target(script, rapo_args)}' does not exist; train first or set eval_model")
    elif (problem := model_folder_problem(_target(script, rapo_args))) is not None:
        raise UsageError(f"eval model: {problem}")
    elif script.eval_base and not model_args.model_name_or_path and _base_of(_target(script, rapo_args)):
        check_model(_base_of(_target(script, rapo_args)))  # the adapter's base, evaluated first
    refuse_unfinished_run(_target(script, rapo_args))
    refuse_what_eval_cannot_run(script, _target(script, rapo_args))
    if script.eval_base and model_args.model_name_or_path:
        check_model(model_args.model_name_or_path, model_args.model_revision)
    check_quantization(model_args)


def run(script, rapo_args, model_args, *, checked: bool = False) -> dict:
    """``checked``: `check` has passed these inputs already, as the ``rapo`` command checks them before TRL imports;
    checking again would look the models up a second time."""
    if not checked:
        check(script, rapo_args, model_args)
    target = _target(script, rapo_args)
    smoke_test = target in MODEL_ALIASES  # `tiny`: an untrained tiny model, a smoke test of the whole command
    if smoke_test:
        target = resolve_model_path(target)
    start = time.perf_counter()
    use_trained_tools(script, target, say_unrecorded=not smoke_test)  # the agent that was trained, not the task's
    tools = build_tools(script)
    sets = eval_sets(script, tools)
    refuse_trained_questions(target, sets)
    # the rows each question is scored by once (evaluate_policy drops a repeated one), which n, the ids and the
    # counts printed describe
    scored = {name: distinct_question_rows(rows["prompt"]) for name, rows in sets.items()}
    print(count_line("Evaluating on", script, scored))
    scoring = {name: set_scoring(script.eval_scoring, script.task, rows["answer"]) for name, rows in sets.items()}
    print("pass@1 by " + ", ".join(f"{SCORING_NAMES[way]} on {name}" for name, way in scoring.items()))
    k, settings = script.eval_samples, sampling(script, rapo_args)
    results: dict[str, dict] = {name: {} for name in sets}
    samples: dict[str, dict] = {name: {} for name in sets}
    models = models_to_evaluate(script, model_args, target)
    missing = [name for name in name_list(script.eval_models, []) if name not in models]
    if missing:  # a model the run did not make (or left unfinished), or base with eval_base false
        logger.warning("rapo eval: eval_models names %s, which this evaluation cannot score (it scores %s).", missing,
                       list(models))
    unscored = [name for name in name_list(script.eval_sampled_models, []) if name not in models]
    if unscored:  # a model the run does not have, or eval_base false: nothing of it is sampled
        logger.warning("rapo eval: eval_sampled_models names %s, which this evaluation does not score (it scores %s): "
                       "no mean@k for %s.", unscored, list(models), "it" if len(unscored) == 1 else "them")
    for model_name, (metrics_by_set, texts_by_set) in score_models(script, rapo_args, model_args, models, sets,
                                                                   tools).items():
        for set_name in sets:
            results[set_name][model_name] = metrics_by_set[set_name]
            samples[set_name][model_name] = texts_by_set[set_name]
    tables = []
    for set_name in sets:
        title = table_title(script.task, set_name, len(scored[set_name]), results[set_name], settings)
        tables.append(format_table(results[set_name], title))
    training = training_steps(models)
    per_step = training_table(training)
    if per_step:
        tables.append(per_step)
    print("\n\n".join(tables))
    primary = next(iter(sets))
    # the questions asked, by id: which rows a score is over, checkable against the training data
    question_ids = {name: [rows["question_id"][i] for i in scored[name]] for name, rows in sets.items()}
    payload = {"task": script.task, "tools": tool_names(script), "tool_protocol": "tags", "split": primary,
               "n": len(scored[primary]), "k": k,
               "rows": results[primary], "samples": samples[primary],
               "question_ids": question_ids[primary],
               "sets": {name: {"n": len(scored[name]), "scoring": scoring[name], "rows": results[name],
                               "samples": samples[name], "question_ids": question_ids[name]}
                        for name in sets},
               "training": training, "eval_seconds": round(time.perf_counter() - start, 1)}
    for name, folder in (("warm_start_sft", WARM_START_DIR), ("sft_on_store_sft", SFT_ON_STORE_DIR),
                         ("sft_same_time_sft", SFT_SAME_TIME_DIR)):
        history = Path(target) / folder / SFT_HISTORY_FILE
        # the warm start's loss curve (its plateau) and the baseline's SFT steps; of the baselines scored alone (a
        # folder left out is another run's, or unfinished)
        if history.is_file() and name.removesuffix("_sft") in models:
            payload[name] = json.loads(history.read_text())
    markdown = "# Evaluation\n\n" + "\n\n".join(tables) + "\n"
    write_json(Path(target) / "eval_results.json", payload)
    (Path(target) / "eval_results.md").write_text(markdown)
    _update_card_and_plots(target, payload)
    if script.eval_report:
        write_json(script.eval_report, payload)
        Path(script.eval_report).with_suffix(".md").write_text(markdown)
    evaluated = len(results[primary])
    print(f"Evaluated {evaluated} models on {len(sets)} sets ({', '.join(f'{n}: {len(r)}' for n, r in scored.items())} "
          f"questions) in {payload['eval_seconds']:.0f}s; results in {target}/eval_results.json"
          + (f" and {script.eval_report}" if script.eval_report else ""))
    return results[primary] if len(sets) == 1 else results


SCORING_NAMES = {"math": "math equivalence", "exact": "exact match"}


def table_title(task: str, set_name: str, n: int, metrics_by_model: dict, settings: dict) -> str:
    """``"arithmetic, eval, n=32, mean@4 of the first 8 at T=1.0"``: what a table's scores are over; mean@k names
    its question count where ``eval_sample_size`` kept it below the set's ``n``, which pass@1 is over, and its
    sampling ``settings`` (`sampling`'s) by `sampling_label`."""
    sampled = next((m for m in metrics_by_model.values() if "mean@k" in m), None)
    if sampled is None:
        return f"{task}, {set_name}, n={n}"
    questions = f" of the first {sampled['questions']}" if sampled["questions"] < n else ""
    return f"{task}, {set_name}, n={n}, mean@{sampled['k']}{questions} at {sampling_label(settings)}"


def _update_card_and_plots(target: str, payload: dict) -> None:
    """The model card's evaluation table, and the run's plots redrawn with pass@1 (when it was trained here)."""
    from rapo_trl.model_card import add_evaluation
    from rapo_trl.plots import plot_run

    if (Path(target) / "README.md").is_file():
        add_evaluation(target, payload)
    if (Path(target) / STATE_FILE).is_file():
        plot_run(target)
