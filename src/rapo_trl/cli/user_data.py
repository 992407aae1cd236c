"""``task: dataset``: the user's own questions and answers, from a JSONL file or a dataset (Hub id or folder),
split so that evaluation never asks a training question. Every row is used unless ``train_size``/``eval_size``
cap it, as ``trl grpo`` trains on the whole split."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

from rapo_trl.cli.arguments import RAPOScriptArguments
from rapo_trl.cli.errors import UsageError
from rapo_trl.cli.parsing import closest
from rapo_trl.jsonl_qa import is_blank_answer, read_qa_jsonl

logger = logging.getLogger(__name__)

USER_TASKS = ("dataset", "jsonl")
DEFAULT_TEST_SPLIT = "test"
"""The split of ``dataset_name`` evaluated on when ``dataset_test_split`` is unset and the dataset has it."""


def check_user_data(script: RAPOScriptArguments) -> tuple[str, ...]:
    """Every check of the user's data that needs neither ``datasets`` nor a model: one source, files that parse
    (the right line named), the columns, no null answer, split names that exist (in a folder `save_to_disk` wrote).
    Returns the keys of ``dataset_path``'s rows, from the read that checked it (none without one): with
    ``jsonl_columns``, the columns a reward may read."""
    given = [name for name in ("dataset_path", "dataset_name") if getattr(script, name)]
    if script.task not in USER_TASKS:
        if given or script.eval_dataset_path:
            raise UsageError(f"{(given or ['eval_dataset_path'])[0]} is your own data: set task: dataset "
                             f"(task={script.task} draws its own questions)")
        ignored = _changed(script, ("dataset_config", "dataset_train_split", "dataset_test_split", "eval_fraction",
                                    "question_column", "answer_column"))
        if ignored:
            raise UsageError(f"{ignored[0]} reads your own data, which task={script.task} has none of (it draws its "
                             "own questions): set task: dataset with dataset_path or dataset_name, or leave it unset")
        return ()
    if len(given) != 1:
        raise UsageError("task=dataset needs dataset_path (a JSONL file) or dataset_name (a Hub id or a dataset "
                         "folder)" + (", not both" if given else ""))
    if script.eval_dataset_path and script.dataset_name:
        raise UsageError("eval_dataset_path goes with dataset_path; with dataset_name set dataset_test_split")
    ignored = _changed(script, ("dataset_config", "dataset_train_split")) if script.dataset_path else []
    if ignored:
        raise UsageError(f"{ignored[0]} goes with dataset_name (a Hub id or a dataset folder), not with dataset_path "
                         "(one JSONL file, all of it training data)")
    if script.dataset_test_split is not None and script.dataset_path:
        raise UsageError("dataset_test_split names a split of dataset_name; with dataset_path give the eval "
                         "questions as eval_dataset_path (or leave both unset: eval_fraction is held out)")
    if not 0 < script.eval_fraction < 1:
        raise UsageError(f"eval_fraction must be in (0, 1), got {script.eval_fraction}")
    if script.eval_dataset_path or script.dataset_test_split is not None:
        _refuse_unused_eval_fraction(script)
    keys: tuple[str, ...] = ()
    for name in ("dataset_path", "eval_dataset_path"):
        path = getattr(script, name)
        if path:
            if not Path(path).is_file():
                raise UsageError(f"{name} {path!r} is not a file; give a JSONL file, one JSON object a line")
            rows = _read_jsonl(script, path)  # parsed here, in a fraction of a second; read again when the rows load
            _refuse_system_turn_column(f"{name} {path!r}", [key for row in rows for key in row])
            if name == "dataset_path":
                keys = tuple(dict.fromkeys(key for row in rows for key in row))
    if script.dataset_name:
        _check_dataset_name(script)
    return keys


def _refuse_unused_eval_fraction(script: RAPOScriptArguments) -> None:
    """Refuse an ``eval_fraction`` the recipe sets where the data has eval questions of its own (``eval_dataset_path``,
    ``dataset_test_split``, a ``test`` split): nothing is held out of the training data then, so the eval set would not
    be the one asked for."""
    if _changed(script, ("eval_fraction",)):
        raise UsageError(f"eval_fraction={script.eval_fraction} is not used: the eval questions are "
                         f"{_eval_set_in_words(script)}, and nothing is held out of the training data; leave "
                         "eval_fraction unset")


def _eval_set_in_words(script: RAPOScriptArguments) -> str:
    if script.eval_dataset_path:
        return f"eval_dataset_path {script.eval_dataset_path!r}"
    if script.dataset_test_split is not None:
        return f"dataset_test_split {script.dataset_test_split!r}"
    return f"the dataset's {DEFAULT_TEST_SPLIT!r} split"


def _changed(script: RAPOScriptArguments, names) -> list[str]:
    """Those of ``names`` the recipe sets to something other than their default."""
    defaults = {f.name: f.default for f in dataclasses.fields(RAPOScriptArguments)}
    return [name for name in names if getattr(script, name) != defaults[name]]


def _read_jsonl(script: RAPOScriptArguments, path: str, reader=read_qa_jsonl):
    """``reader``'s rows of the file (a list, or with `load_jsonl_qa` a Dataset); its errors as one line."""
    try:
        return reader(path, question_key=script.question_column, answer_key=script.answer_column)
    except ValueError as error:
        hint = "; set question_column and answer_column to the file's field names" if "no key" in str(error) else ""
        raise UsageError(f"{error}{hint}") from None


def jsonl_columns(row_columns, file_keys) -> tuple[str, ...]:
    """The columns of ``dataset_path``'s rows: ``row_columns`` (every row's) and the file's own keys (as
    ``check_user_data`` returns them)."""
    return tuple(dict.fromkeys([*row_columns, *file_keys]))


def _check_dataset_name(script: RAPOScriptArguments) -> None:
    """A file is not a dataset name; a folder `save_to_disk` wrote has its splits and columns checked from its
    JSON files. A Hub id or a folder of data files is checked when it loads."""
    name = script.dataset_name
    path = Path(name).expanduser()
    if path.is_file():
        raise UsageError(f"dataset_name {name!r} is a file, not a dataset: give a JSONL file as dataset_path "
                         f"(--dataset_path {name}); dataset_name takes a Hub id or a dataset folder")
    if not path.is_dir():
        if name.startswith((".", "/", "~")) or name.count("/") > 1:
            raise UsageError(f"dataset_name {name!r} is not a folder, nor a Hub id (org/name)")
        return
    splits = _saved_splits(path)
    if splits is not None:
        _check_split_names(script, splits)


def _saved_splits(folder: Path) -> dict[str, list[str] | None] | None:
    """``split -> column names`` of a folder `save_to_disk` wrote (None where a split's features are unreadable);
    None for any other folder. A single saved Dataset is one split, named by ``dataset_train_split``."""
    def columns(split_folder: Path) -> list[str] | None:
        try:
            return list(json.loads((split_folder / "dataset_info.json").read_text())["features"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    if (folder / "dataset_dict.json").is_file():
        try:
            names = json.loads((folder / "dataset_dict.json").read_text())["splits"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return {split: columns(folder / split) for split in names}
    if (folder / "state.json").is_file():
        return {None: columns(folder)}
    return None


def _check_split_names(script: RAPOScriptArguments, splits: dict) -> None:
    if None in splits:  # one saved Dataset: it is the training split
        splits = {script.dataset_train_split: splits[None]}
    _require_split(script, "dataset_train_split", script.dataset_train_split, splits)
    if script.dataset_test_split is not None:
        _require_split(script, "dataset_test_split", script.dataset_test_split, splits)
    elif _test_split(script, splits) is not None:
        _refuse_unused_eval_fraction(script)
    for split, columns in splits.items():
        if split in (script.dataset_train_split, _test_split(script, splits)) and columns is not None:
            _require_columns(script, split, columns)


def _require_split(script: RAPOScriptArguments, flag: str, split: str, splits) -> None:
    if split not in splits:
        close = closest(split, list(splits))
        raise UsageError(f"dataset {script.dataset_name!r} has no split {split!r} ({flag})"
                         + (f"; did you mean {close!r}?" if close else "") + f"; it has {', '.join(map(str, splits))}")


def _test_split(script: RAPOScriptArguments, splits) -> str | None:
    """The split evaluated on: ``dataset_test_split``, else a ``test`` split when there is one, else None
    (``eval_fraction`` of the training split is held out)."""
    if script.dataset_test_split is not None:
        return script.dataset_test_split
    return DEFAULT_TEST_SPLIT if DEFAULT_TEST_SPLIT in splits else None


TRL_COLUMNS = {"question_column": ("question", "prompt"), "answer_column": ("answer", "solution")}
"""``field: (RAPO's default column, TRL's)``: a dataset in TRL's format (`trl-lib/*`: a ``prompt``, conversational or
plain, and a ``solution``) is read with the default column names unset."""


def question_answer_columns(script: RAPOScriptArguments, columns) -> tuple[str, str]:
    """The question and answer columns of a dataset with ``columns``: the ones set, or TRL's where the defaults are
    absent."""
    found = []
    for field, (default, trl) in TRL_COLUMNS.items():
        name = getattr(script, field)
        found.append(trl if name == default and default not in columns and trl in columns else name)
    return found[0], found[1]


def _require_columns(script: RAPOScriptArguments, split: str, columns) -> None:
    missing = [name for name in question_answer_columns(script, columns) if name not in columns]
    if missing:
        raise UsageError(f"dataset {script.dataset_name!r} (split {split!r}) has no column "
                         f"{', '.join(map(repr, missing))}; it has {', '.join(columns)}: set question_column and "
                         "answer_column")


def user_splits(script: RAPOScriptArguments):
    """``(train, eval)`` question/answer datasets (columns question, answer, ...) with no question in both."""
    from rapo_trl.tasks.held_out import hold_out, without_questions_of

    if script.dataset_name:
        train, held = _dataset_splits(script)
        _refuse_shared_question_ids(script, {script.dataset_train_split: train,
                                             script.dataset_test_split or DEFAULT_TEST_SPLIT: held})
    else:
        train = _jsonl(script, script.dataset_path)
        held = _jsonl(script, script.eval_dataset_path) if script.eval_dataset_path else None
        _refuse_shared_question_ids(script, {script.dataset_path: train, script.eval_dataset_path: held})
    _warn_of_conflicting_answers(script, [train] if held is None else [train, held])
    if held is None:
        try:
            return hold_out(train, script.eval_fraction, script.task_seed)
        except ValueError as error:
            raise UsageError(str(error)) from None
    return _some_left(script, without_questions_of(train, held), len(train)), held


def _warn_of_conflicting_answers(script: RAPOScriptArguments, splits: list) -> None:
    """Warn of a question asked more than once (up to spacing and case) with answers of different text: each copy is
    rewarded against its own answer, so training punishes on one copy what it rewards on the other (unless the two
    are the same number written two ways, which the reward may take as equal)."""
    from rapo_trl.tasks.held_out import same_question_key

    answers: dict[str, set[str]] = {}
    for rows in splits:
        for question, answer in zip(rows["question"], rows["answer"]):
            answers.setdefault(same_question_key(question), set()).add(str(answer).strip())
    conflicting = {question: sorted(texts) for question, texts in answers.items() if len(texts) > 1}
    if conflicting:
        question, texts = next(iter(conflicting.items()))
        logger.warning("dataset %r: %d question(s) appear more than once with different answers (e.g. %r: %s); each "
                       "copy is rewarded against its own answer. Deduplicate the data unless the answers are one "
                       "value written two ways.", script.dataset_name or script.dataset_path, len(conflicting),
                       question[:60], " vs ".join(repr(text[:30]) for text in texts[:3]))


def _some_left(script: RAPOScriptArguments, train, before: int):
    """``train`` unless the eval set took every one of its questions (the same file or split given for both): the
    commands would go on with no training question."""
    if len(train) == 0:
        source = script.dataset_name or script.dataset_path
        raise UsageError(f"all {before} training questions of {source!r} are eval questions too (each is asked by "
                         "the eval set, so none is left to train on): give eval questions of their own "
                         "(eval_dataset_path, dataset_test_split), or leave them unset to hold out eval_fraction")
    return train


def _refuse_shared_question_ids(script: RAPOScriptArguments, splits: dict) -> None:
    """Refuse a ``question_id`` column in which one id names two questions (ids counted from 0 in each split): the
    held-out split's ids would drop the training rows that share them, and the store and the warm start, which find a
    question's trajectories by its id, would give one question another's."""
    seen: dict[str, tuple[str, str]] = {}
    for split, rows in splits.items():
        if rows is None or "question_id" not in rows.column_names:
            continue
        for question_id, question in zip(rows["question_id"], rows["question"]):
            if question_id is None:  # to_rapo_rows gives it the hash of its text
                continue
            first = seen.setdefault(str(question_id), (split, question))
            if first[1] != question:
                source = script.dataset_name or script.dataset_path
                raise UsageError(f"dataset {source!r}: question_id {question_id!r} names two questions "
                                 f"({first[0]!r}: {first[1][:40]!r}; {split!r}: {question[:40]!r}); give each "
                                 "question its own id across splits, or drop the question_id column (a hash of "
                                 "each question's text is its id then)")


def _jsonl(script: RAPOScriptArguments, path: str):
    from rapo_trl.tasks import load_jsonl_qa

    return _read_jsonl(script, path, load_jsonl_qa)


def load_user_dataset(name: str, config: str | None = None):
    """A ``DatasetDict`` (or ``Dataset``) from a Hub id, a folder of data files, or a folder ``save_to_disk`` wrote."""
    import datasets

    folder = Path(name)
    if (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file():
        return datasets.load_from_disk(str(folder))
    return datasets.load_dataset(name, name=config)


def _dataset_splits(script: RAPOScriptArguments):
    try:
        data = load_user_dataset(script.dataset_name, script.dataset_config)
    except (OSError, ValueError, FileNotFoundError) as error:
        raise UsageError(f"cannot load dataset_name {script.dataset_name!r}: {' '.join(str(error).split())}") from None
    if not hasattr(data, "keys"):  # one Dataset (a folder save_to_disk wrote from a single split)
        data = {script.dataset_train_split: data}
    _require_split(script, "dataset_train_split", script.dataset_train_split, data)
    test_split = _test_split(script, data)
    if test_split is not None:
        _require_split(script, "dataset_test_split", test_split, data)
        _refuse_unused_eval_fraction(script)
    train = _question_answer(script, data[script.dataset_train_split], script.dataset_train_split)
    return train, None if test_split is None else _question_answer(script, data[test_split], test_split)


def _question_answer(script: RAPOScriptArguments, rows, split: str):
    """``rows`` with the question and answer columns named ``question`` and ``answer`` (a conversational prompt's user
    text as the question); a null answer or a question that is no text refused."""
    _require_columns(script, split, rows.column_names)
    _refuse_system_turn_column(f"dataset {script.dataset_name!r} (split {split!r})", rows.column_names)
    question_column, answer_column = question_answer_columns(script, rows.column_names)
    empty = next((index for index, answer in enumerate(rows[answer_column]) if is_blank_answer(answer)), None)
    if empty is not None:
        raise UsageError(f"dataset {script.dataset_name!r} (split {split!r}) row {empty}: "
                         f"'{answer_column}' is {rows[empty][answer_column]!r}; every question needs its answer")
    rows = _question_text(script, rows, split, question_column)
    mapping = {question_column: "question", answer_column: "answer"}
    renamed = {old: new for old, new in mapping.items() if old != new}
    clashing = [new for new in renamed.values() if new in rows.column_names]
    return rows.remove_columns(clashing).rename_columns(renamed) if renamed else rows


QUESTION_ROLES = ("system", "user")
"""The turns a conversation may hold: its question is the user's text; its system turn is kept, after the prompt the
recipe builds (`SYSTEM_TURN_COLUMN`)."""

SYSTEM_TURN_COLUMN = "system_turn"
"""The column holding each conversation's system turn, which the training prompt's system message carries after the
recipe's own (``to_rapo_rows(system_column=...)``)."""


def _refuse_replies(script: RAPOScriptArguments, split: str, column: str, conversations) -> None:
    """Refuse a conversation holding another turn than the user's and the system's: an assistant's reply (a chat
    dataset's ``messages``) would be put in the question, showing the policy its answer, and a few-shot conversation
    is not one question."""
    for index, conversation in enumerate(conversations):
        if isinstance(conversation, str):
            continue
        role = next((message["role"] for message in conversation
                     if message.get("role", "user") not in QUESTION_ROLES), None)
        if role is not None:
            raise UsageError(f"dataset {script.dataset_name!r} (split {split!r}) row {index}: question column "
                             f"'{column}' holds a conversation with a turn of role {role!r}, whose text would be put "
                             "in the question; give the column of question text, or prompts of the user's turn alone "
                             "(TRL's prompt-only format)")


def _question_text(script: RAPOScriptArguments, rows, split: str, column: str):
    """``rows`` with ``column`` as text: a conversation (TRL's conversational ``prompt``) becomes its user messages'
    text, and its system turn the ``SYSTEM_TURN_COLUMN``; anything else that is not a string is refused in one
    line."""
    from rapo_trl.store.steps import prompt_text

    values = rows[column]
    bad = next((i for i, value in enumerate(values) if not isinstance(value, (str, list))
                or (isinstance(value, list) and not all(isinstance(m, dict) and "content" in m for m in value))), None)
    if bad is not None:
        raise UsageError(f"dataset {script.dataset_name!r} (split {split!r}) row {bad}: question column '{column}' "
                         f"holds {type(values[bad]).__name__} {str(values[bad])[:60]!r}, not question text or a "
                         "conversation; set question_column to the column of question text")
    if all(isinstance(value, str) for value in values):
        return rows
    _refuse_replies(script, split, column, values)
    texts = [value if isinstance(value, str) else prompt_text(value) for value in values]
    rows = rows.remove_columns([column]).add_column(column, texts)
    system_turns = [None if isinstance(value, str) else _system_turn(value) for value in values]
    if not any(system_turns):
        return rows
    logger.info("dataset %r (split %r): %d of %d conversations have a system turn, kept in the training prompt "
                "after %s.", script.dataset_name, split, sum(map(bool, system_turns)), len(values),
                _system_prompt_in_words(script))
    return rows.add_column(SYSTEM_TURN_COLUMN, system_turns)


def _refuse_system_turn_column(source: str, columns) -> None:
    """Refuse data with a column of the name RAPO gives the conversations' system turns: its text would be put in
    the system message, or the conversations' turns in its place."""
    if SYSTEM_TURN_COLUMN in columns:
        raise UsageError(f"{source} has a column {SYSTEM_TURN_COLUMN!r}, the name RAPO gives the system turns of "
                         "conversational prompts, which the training prompt carries; rename that column")


def _system_turn(conversation) -> str | None:
    """The text of a conversation's system messages (None for none)."""
    from rapo_trl.store.steps import prompt_text

    system = [{"content": message["content"]} for message in conversation if message.get("role") == "system"]
    return prompt_text(system).strip() or None


def _system_prompt_in_words(script: RAPOScriptArguments) -> str:
    """What comes before a conversation's system turn in a training prompt's system message: nothing with an
    environment (its chat template shows the tools), else the protocol for the recipe's tools."""
    if script.environment_factory is not None:
        return "no system prompt of RAPO's (with environment_factory the chat template shows the tools)"
    return "RAPO's system prompt for the recipe's tools (rapo_trl.tasks.system_prompt_for)"
