"""What a ``rapo train`` run trained with (its tools, tool protocol and environment), written beside the model so
that ``rapo eval`` evaluates the same agent by default rather than the task's default tools."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterable
from pathlib import Path

from rapo_trl.cli.errors import UsageError
from rapo_trl.saved_checkpoints import RUN_RECORD, checkpoint_saved_last, saved_run_id

RUN_ID_FILE = "rapo_run_id.json"
"""The file in each baseline folder that names the run that finished the baseline (``{"run_id": ...}``): a later run
in the same output_dir may stop before it makes that baseline again, and leave the earlier run's beside its model."""

logger = logging.getLogger("rapo_trl.cli")


def write_run_record(output_dir: str, tools: list[str], tool_protocol: str, environment_factory: str | None,
                     task: str, base_model: str | None = None, trained_questions: Iterable[str] = (),
                     baselines: Iterable[str] | None = None, run_id: str | None = None,
                     stored_questions: dict | None = None, finished: bool | None = None) -> None:
    """Record how the run's policy calls tools: ``tools`` as the command names them (built-in names, import
    paths), ``tool_protocol`` (``"tags"`` or ``"json"``), the environment's import path; ``base_model``, what
    a pushed adapter names as its base (``rapo push`` reads it); the questions it trained on, as hashes of their
    text (``rapo eval`` refuses an eval set holding one); and the ``baselines`` it makes beside the model (names of
    ``rapo eval``'s models: it scores no other folder, such as one an earlier run left in the same output_dir); and the
    ``run_id`` its baselines are stamped with (`stamp_baseline`: ``rapo eval`` scores no baseline another run made);
    and ``stored_questions``, the questions of the store collections it retrieved from or imitated
    (`stored_questions_record`), which ``rapo eval`` refuses too; and whether the run ``finished``, saved its model
    (`record_run_finished`): ``None`` writes nothing, as records of older versions hold, which are scored."""
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    record = {"task": task, "tools": list(tools), "tool_protocol": tool_protocol,
              "environment_factory": environment_factory, "base_model": base_model}
    if baselines is not None:
        record["baselines"] = list(baselines)
    if run_id is not None:
        record["run_id"] = run_id
    if finished is not None:
        record["finished"] = finished
    hashes = question_hashes(trained_questions)
    if hashes:
        record["trained_question_hashes"] = sorted(hashes)
    if stored_questions and stored_questions.get("store_question_hashes"):
        record.update(stored_questions)
    (Path(output_dir) / RUN_RECORD).write_text(json.dumps(record, indent=2) + "\n")


def record_run_finished(output_dir: str) -> None:
    """Record in ``output_dir`` that its run saved its model there."""
    path = Path(output_dir) / RUN_RECORD
    path.write_text(json.dumps({**json.loads(path.read_text()), "finished": True}, indent=2) + "\n")


def refuse_unfinished_run(target: str, use_checkpoint: str = "give --eval_model {}") -> None:
    """Refuse, in one line, to score (or push) the model in ``target`` as its recorded run's when that run stopped
    before it saved its model: the record is written as a run starts, so the model there is an earlier run's in the
    same output_dir (one with ``save_strategy`` no saves nothing until its end). A checkpoint holds no record of its
    own: it is the stopped run's, and ``use_checkpoint`` says how to use it instead."""
    path = Path(target) / RUN_RECORD
    record = json.loads(path.read_text()) if path.is_file() else {}
    if record.get("finished") is not False:
        return
    checkpoint = checkpoint_saved_last(target)
    then = (f"{use_checkpoint.format(checkpoint)} (its newest checkpoint), or resume it to its end with "
            "--resume_from_checkpoint" if checkpoint else "train it again to its end")
    raise UsageError(f"{target}: the run its {RUN_RECORD} records (run {record.get('run_id')}) did not finish, it "
                     "stopped before it saved its model, so the model there is an earlier run's in the same output_dir "
                     f"(or a half-saved one), not the recorded run's: {then}")


def run_id_for(output_dir: str, resume: str | None) -> str | None:
    """The id of the run ``rapo train`` starts in ``output_dir``: a new one, unless it resumes a checkpoint, whose
    run it continues: it keeps that run's id (so the baselines the run finished before it stopped still count). That
    is the id the checkpoint was saved under, wherever it lies (beside another run's record, or set aside in
    ``earlier-run-<time>``); for a checkpoint of ``output_dir`` that names none (saved by an older version), its
    record's, or none where the record has none (a run whose baselines carry no id: ``rapo eval`` then checks none)."""
    saved_under = saved_run_id(resume) if resume is not None else None
    if saved_under is not None:
        return saved_under
    record = Path(output_dir) / RUN_RECORD
    if resume is not None and Path(resume).resolve().parent == Path(output_dir).resolve() and record.is_file():
        return json.loads(record.read_text()).get("run_id")
    return uuid.uuid4().hex


def stamp_baseline(folder: str | Path, run_id: str | None) -> None:
    """Name the run ``run_id`` in the baseline ``folder`` it has finished (nothing where the run has no id)."""
    if run_id is not None:
        (Path(folder) / RUN_ID_FILE).write_text(json.dumps({"run_id": run_id}) + "\n")


def unstamp_baseline(folder: str | Path) -> None:
    """Name no run in ``folder``, about to be made again: a run stopped while it remakes it leaves no one's baseline."""
    (Path(folder) / RUN_ID_FILE).unlink(missing_ok=True)


def baseline_run_id(folder: str | Path) -> str | None:
    """The id of the run that finished the baseline in ``folder``; ``None`` where it names none."""
    try:
        return json.loads((Path(folder) / RUN_ID_FILE).read_text()).get("run_id")
    except (OSError, ValueError, AttributeError):
        return None


def question_hashes(questions: Iterable[str]) -> set[str]:
    """Each question's hash of its words, in any case, however spaced (`same_question_key`, as training leaves out an
    eval question): the same question whatever its split, file, row id or export."""
    from rapo_trl.tasks.held_out import same_question_key
    from rapo_trl.tasks.splits import stable_hash

    return {stable_hash(same_question_key(question)) for question in questions}


def _hash_forms(question: str) -> set[str]:
    """The hashes a run record may name ``question`` by: of its words (`question_hashes`), or of its text as written,
    as records have also held it."""
    from rapo_trl.tasks.splits import stable_hash

    return question_hashes([question]) | {stable_hash(question)}


def stored_questions_record(stores: dict, first_keys: dict) -> dict:
    """The run record's fields naming the questions of ``stores`` (``collection name -> store``), the collections a
    run retrieves from or imitates: their names, the hashes of their questions as their keys read them
    (``first_keys``: ``collection name -> stored_first_keys``), and the lengths those keys are cut to, for
    ``rapo eval`` to read an eval question the same way. Empty where ``stores`` is."""
    if not stores:
        return {}
    keys = set().union(*(first_keys[name] for name in stores))
    return {"store_collections": sorted(stores),
            "store_key_max_chars": sorted({int(store.config.key_max_chars) for store in stores.values()}),
            "store_question_hashes": sorted(question_hashes(keys))}


def _stored_hash_forms(question: str, key_max_chars: Iterable[int]) -> set[str]:
    """The hashes a run record names ``question`` by among the store's questions: as a key cut to each length reads it
    (a long question's key keeps its last characters alone), or as training's questions are named."""
    from rapo_trl.store.steps import preprocess_context

    keys = [preprocess_context(question, max_chars) for max_chars in key_max_chars]
    return question_hashes(keys) | _hash_forms(question)


def refuse_trained_questions(target: str, sets: dict) -> None:
    """Refuse, in one line, an eval set (``name -> rows`` with a ``question`` column) holding a question the run at
    ``target`` trained on, or one whose stored solutions it retrieved or imitated: eval settings other than
    training's (a larger GSM8K ``eval_size``, another ``task_seed`` or ``eval_fraction``, another dataset), or a store
    built with a larger ``train_size``, can draw the eval set from those questions, and its scores would not be held
    out. A record written before runs listed their store's questions is checked for the trained ones alone."""
    record = read_run_record(target) or {}
    trained = set(record.get("trained_question_hashes") or [])
    stored = set(record.get("store_question_hashes") or [])
    key_max_chars = record.get("store_key_max_chars") or []
    for name, rows in sets.items():
        seen = [question for question in rows["question"] if _hash_forms(question) & trained]
        if seen:
            raise UsageError(f"eval set {name!r} holds {len(seen)} of its {len(rows)} questions that {target} "
                             f"trained on (first: {seen[0][:60]!r}); its scores would not be held out: evaluate with "
                             "the data settings the run trained with (eval_size, eval_fraction, task_seed, dataset), "
                             "or drop from your data the questions its train and test splits share")
        seen = [question for question in rows["question"] if _stored_hash_forms(question, key_max_chars) & stored]
        if seen:
            collections = ", ".join(map(repr, record.get("store_collections") or []))
            raise UsageError(f"eval set {name!r} holds {len(seen)} of its {len(rows)} questions whose solutions the "
                             f"store collection(s) {collections} that {target} trained with held (first: "
                             f"{seen[0][:60]!r}): training retrieved or imitated them, so its scores would not be "
                             "held out: evaluate with the data settings rapo build-store ran with (train_size, "
                             "eval_size, eval_fraction, task_seed, dataset), or build the store without these "
                             "questions")


def read_run_record(model_folder: str) -> dict | None:
    """The record of the run that trained ``model_folder`` (a checkpoint reads its run's), or ``None``."""
    folder = Path(model_folder)
    for candidate in (folder / RUN_RECORD, folder.parent / RUN_RECORD):
        if candidate.is_file():
            return json.loads(candidate.read_text())
    return None


def refuse_what_eval_cannot_run(script, target: str) -> None:
    """Refuse, in one line, a model ``rapo eval`` cannot evaluate as it was trained: one with an environment, or one
    that calls tools as JSON tool calls."""
    if script.environment_factory is not None:
        raise UsageError(_NO_ENVIRONMENT.format(what=f"--environment_factory {script.environment_factory}"))
    record = read_run_record(target) or {}
    if record.get("environment_factory"):
        raise UsageError(_NO_ENVIRONMENT.format(
            what=f"{target} was trained on environment_factory {record['environment_factory']}"))
    if record.get("tool_protocol", "tags") != "tags":
        raise UsageError(f"{target} was trained calling tools as {record['tool_protocol']} tool calls; rapo eval runs "
                         "tools in tags only: evaluate it in Python (RAPOTrainer.evaluate) until it can")


def use_trained_tools(script, target: str, say_unrecorded: bool = True) -> None:
    """Set ``script.tools`` to the tools the run at ``target`` trained with unless the command names tools; warn
    where named tools differ from them, or the run trained on another task. A folder that holds no run record (a
    model trained from Python, a base model) is evaluated with the task's tools, which ``say_unrecorded`` says."""
    record = read_run_record(target)
    if record is None:
        if say_unrecorded and script.tools is None:
            from rapo_trl.cli.common import tool_names

            print(f"{target} holds no {RUN_RECORD} (`rapo train` writes one): evaluating with the task's tools "
                  f"({', '.join(tool_names(script)) or 'none'}); --tools names those it was trained with.")
        return
    if record.get("task") and record["task"] != script.task:
        logger.warning("rapo eval: %s was trained on task %r and is evaluated on %r.", target, record["task"],
                       script.task)
    trained = list(record.get("tools") or [])
    if script.tools is None:
        script.tools = trained
        return
    given = [script.tools] if isinstance(script.tools, str) else list(script.tools)
    if sorted(given) != sorted(trained):
        logger.warning("rapo eval: evaluating with tools %s, but %s was trained with %s: the scores are of another "
                       "agent than the one trained (leave out --tools to use the trained ones).", given, target, trained)


_NO_ENVIRONMENT = ("rapo eval does not evaluate a model with an environment yet ({what}): it would score the task's "
                   "tag tools, a protocol the model never trained with. Evaluate it in Python with "
                   "RAPOTrainer(..., eval_dataset=..., environment_factory=...).evaluate()")
