"""``task: dataset``: the user's own questions and answers, from a JSONL file or a dataset (Hub id or folder),
split so that evaluation never asks a training question."""

from __future__ import annotations

import json
from pathlib import Path

from rapo_trl.cli.arguments import RAPOScriptArguments

USER_TASKS = ("dataset", "jsonl")


def check_user_data(script: RAPOScriptArguments) -> None:
    """The cheap checks: exactly one source, files that exist, a fraction that leaves both sides rows."""
    from rapo_trl.cli.common import UsageError

    given = [name for name in ("dataset_path", "dataset_name") if getattr(script, name)]
    if script.task not in USER_TASKS:
        if given or script.eval_dataset_path:
            raise UsageError(f"{(given or ['eval_dataset_path'])[0]} is your own data: set task: dataset "
                             f"(task={script.task} draws its own questions)")
        return
    if len(given) != 1:
        raise UsageError("task=dataset needs dataset_path (a JSONL file) or dataset_name (a Hub id or a dataset "
                         "folder)" + (", not both" if given else ""))
    for name in ("dataset_path", "eval_dataset_path"):
        path = getattr(script, name)
        if path and not Path(path).is_file():
            raise UsageError(f"{name} {path!r} is not a file; give a JSONL file, one JSON object a line")
    if script.eval_dataset_path and script.dataset_name:
        raise UsageError("eval_dataset_path goes with dataset_path; with dataset_name set dataset_test_split")
    if not 0 < script.eval_fraction < 1:
        raise UsageError(f"eval_fraction must be in (0, 1), got {script.eval_fraction}")


def user_splits(script: RAPOScriptArguments):
    """``(train, eval)`` question/answer datasets (columns question, answer, ...) with no question in both."""
    from rapo_trl.tasks.held_out import hold_out, without_questions_of

    if script.dataset_name:
        train, held = _dataset_splits(script)
    else:
        train = _jsonl(script, script.dataset_path)
        held = _jsonl(script, script.eval_dataset_path) if script.eval_dataset_path else None
    if held is None:
        from rapo_trl.cli.common import UsageError

        try:
            return hold_out(train, script.eval_fraction, script.task_seed)
        except ValueError as error:
            raise UsageError(str(error)) from None
    return without_questions_of(train, held), held


def _jsonl(script: RAPOScriptArguments, path: str):
    from rapo_trl.cli.common import UsageError
    from rapo_trl.tasks import load_jsonl_qa

    try:
        return load_jsonl_qa(path, question_key=script.question_column, answer_key=script.answer_column)
    except json.JSONDecodeError as error:
        raise UsageError(f"{path} is not JSONL (one JSON object a line): {error}") from None
    except ValueError as error:
        if "no key" not in str(error):
            raise
        raise UsageError(f"{error}; set question_column and answer_column to the file's field names") from None


def load_user_dataset(name: str, config: str | None = None):
    """A ``DatasetDict`` (or ``Dataset``) from a Hub id, a folder of data files, or a folder ``save_to_disk`` wrote."""
    import datasets

    folder = Path(name)
    if (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file():
        return datasets.load_from_disk(str(folder))
    return datasets.load_dataset(name, name=config)


def _dataset_splits(script: RAPOScriptArguments):
    from rapo_trl.cli.common import UsageError

    try:
        data = load_user_dataset(script.dataset_name, script.dataset_config)
    except (OSError, ValueError, FileNotFoundError) as error:
        raise UsageError(f"cannot load dataset_name {script.dataset_name!r}: {' '.join(str(error).split())}") from None
    if not hasattr(data, "keys"):  # one Dataset (a folder save_to_disk wrote from a single split)
        data = {script.dataset_train_split: data}
    if script.dataset_train_split not in data:
        raise UsageError(f"dataset {script.dataset_name!r} has no split {script.dataset_train_split!r} "
                         f"(dataset_train_split); it has {', '.join(data)}")
    train = _question_answer(script, data[script.dataset_train_split])
    test = data.get(script.dataset_test_split)
    return train, None if test is None else _question_answer(script, test)


def _question_answer(script: RAPOScriptArguments, rows):
    """``rows`` with the question and answer columns named ``question`` and ``answer``."""
    from rapo_trl.cli.common import UsageError

    mapping = {script.question_column: "question", script.answer_column: "answer"}
    missing = [name for name in mapping if name not in rows.column_names]
    if missing:
        raise UsageError(f"dataset {script.dataset_name!r} has no column {', '.join(map(repr, missing))}; it has "
                         f"{', '.join(rows.column_names)}: set question_column and answer_column")
    renamed = {old: new for old, new in mapping.items() if old != new}
    clashing = [new for new in renamed.values() if new in rows.column_names]
    return rows.remove_columns(clashing).rename_columns(renamed) if renamed else rows
