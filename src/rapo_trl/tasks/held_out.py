"""Your own question/answer data, split for training and evaluation without the two ever sharing a question."""

from __future__ import annotations

from datasets import Dataset

from rapo_trl.question_ids import question_id_of


def question_ids(rows: Dataset, question_column: str = "question") -> list[str]:
    """The ``question_id`` column where there is one, else a hash of each question (as ``to_rapo_rows`` makes)."""
    if "question_id" in rows.column_names:
        return [str(i) if i is not None else question_id_of(q)
                for i, q in zip(rows["question_id"], rows[question_column])]
    return [question_id_of(q) for q in rows[question_column]]


def same_question_key(question: str) -> str:
    """What two copies of one question share: its words, in any case, however spaced (a file exported again adds a
    trailing space or newline, which would otherwise make a held-out question a training one too)."""
    return " ".join(question.split()).casefold()


def without_questions_of(train: Dataset, held_out: Dataset, question_column: str = "question") -> Dataset:
    """``train`` less every row that asks a question of ``held_out`` (by question id, or by text up to spacing and
    case)."""
    held_ids = set(question_ids(held_out, question_column))
    held_texts = {same_question_key(question) for question in held_out[question_column]}
    keep = [i for i, (qid, question) in enumerate(zip(question_ids(train, question_column), train[question_column]))
            if qid not in held_ids and same_question_key(question) not in held_texts]
    return train.select(keep) if len(keep) < len(train) else train


def hold_out(rows: Dataset, fraction: float, seed: int, question_column: str = "question") -> tuple[Dataset, Dataset]:
    """``(train, eval)``: a seeded ``fraction`` of ``rows`` held out for evaluation (``datasets``'
    ``train_test_split``), and the rest for training less any repeat of a held-out question."""
    if not 0 < fraction < 1:
        raise ValueError(f"the held-out fraction must be in (0, 1), got {fraction}")
    if len(rows) < 2:
        raise ValueError(f"{len(rows)} row(s) cannot be split into training and held-out questions")
    parts = rows.train_test_split(test_size=fraction, seed=seed)
    return without_questions_of(parts["train"], parts["test"], question_column), parts["test"]
