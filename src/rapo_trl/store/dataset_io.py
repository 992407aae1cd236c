"""Between trace stores and ``datasets.Dataset``: trajectories in, step records out and back in."""

from __future__ import annotations

import numpy as np

from rapo_trl.store.steps import StepRecord

RECORD_COLUMNS = (
    "id",
    "key",
    "value",
    "reward",
    "question_id",
    "step_index",
    "num_steps",
    "source",
    "trajectory_id",
    "created_at",
    "embedder",
)
_REQUIRED_RECORD_COLUMNS = ("key", "value", "reward", "question_id", "step_index")
_CORE_METADATA = set(RECORD_COLUMNS) - {"id", "key"}  # what Chroma keeps as metadata


def require_columns(ds, columns, what: str) -> None:
    """Raise a ``ValueError`` naming the missing columns and the ones the dataset has."""
    missing = [column for column in columns if column not in ds.column_names]
    if missing:
        raise ValueError(
            f"The {what} dataset lacks column(s) {missing}; it has {ds.column_names}. "
            "Name the right columns with the *_column arguments."
        )


def add_from_dataset(
    store,
    ds,
    text_column: str = "trajectory",
    reward_column: str = "reward",
    question_column: str = "question_id",
    prompt_column: str | None = "auto",
    source_column: str | None = None,
    source: str = "offline",
    keep_top_k: int | None = 5,
    on_invalid: str = "raise",
) -> int:
    """Store a dataset of tagged trajectories (one row each); returns the number of records added.

    ``prompt_column`` holds the question text or chat messages that prefix every key; ``"auto"`` uses
    ``prompt`` or ``question`` when present, ``None`` uses no prompt. ``source_column`` (optional)
    gives each row its own source, otherwise ``source`` applies to all.
    """
    if prompt_column == "auto":
        prompt_column = next((c for c in ("prompt", "question") if c in ds.column_names), None)
    columns = [text_column, reward_column, question_column]
    columns += [c for c in (prompt_column, source_column) if c is not None]
    require_columns(ds, columns, "trajectory")
    prompts = ds[prompt_column] if prompt_column is not None else None
    if source_column is None:
        return store.add_trajectories(
            ds[text_column], ds[reward_column], ds[question_column], source, keep_top_k, prompts, on_invalid
        )
    # Per-row sources: validate everything first, then write each source's rows.
    from rapo_trl.store.ingest import validate_trajectories

    validate_trajectories(ds[text_column], ds[reward_column], ds[question_column], prompts, on_invalid)
    sources = [str(s) for s in ds[source_column]]
    added = 0
    for name in dict.fromkeys(sources):
        rows = [i for i, s in enumerate(sources) if s == name]
        subset = ds.select(rows)
        added += store.add_trajectories(
            subset[text_column],
            subset[reward_column],
            subset[question_column],
            name,
            keep_top_k,
            subset[prompt_column] if prompt_column is not None else None,
            on_invalid,
        )
    return added


def to_dataset(store, include_embeddings: bool = True):
    """Every record as one row, sorted by question, trajectory and step (deterministic)."""
    from datasets import Dataset

    include = ["documents", "metadatas"] + (["embeddings"] if include_embeddings else [])
    rows: dict[str, list] = {column: [] for column in RECORD_COLUMNS}
    extras: dict[str, list] = {}
    embeddings = []
    for page in store.iter_batches(include):
        for index, (record_id, key, metadata) in enumerate(
            zip(page["ids"], page["documents"], page["metadatas"], strict=True)
        ):
            row = {"id": record_id, "key": key, **metadata}
            for column in RECORD_COLUMNS:
                rows[column].append(row.get(column))
            for name in set(metadata) - _CORE_METADATA:
                extras.setdefault(name, [None] * (len(rows["id"]) - 1)).append(metadata[name])
            for values in extras.values():
                if len(values) < len(rows["id"]):
                    values.append(None)
            if include_embeddings:
                embeddings.append(np.asarray(page["embeddings"][index], dtype=np.float32))
    order = sorted(
        range(len(rows["id"])),
        key=lambda i: (rows["question_id"][i], rows["trajectory_id"][i] or "", rows["step_index"][i]),
    )
    data = {column: [values[i] for i in order] for column, values in {**rows, **extras}.items()}
    if include_embeddings:
        data["embedding"] = [embeddings[i].tolist() for i in order]
    return Dataset.from_dict(data)


def add_records_from_dataset(store, ds) -> int:
    """Write the records of an exported dataset into ``store``; reuses its ``embedding`` column when
    it was made by the store's embedder, otherwise re-embeds the keys."""
    require_columns(ds, _REQUIRED_RECORD_COLUMNS, "trace-record")
    from rapo_trl.store.steps import record_id, reward_problem, trajectory_id

    records = []
    extra_metadata = []
    known = set(RECORD_COLUMNS) | {"embedding"}
    for index, row in enumerate(ds):
        if (problem := reward_problem(row["reward"])) is not None:
            raise ValueError(f"Record row {index}: reward {problem}; nothing was stored.")
        if not isinstance(row["value"], str) or not row["value"].strip():
            raise ValueError(f"Record row {index}: value is empty; nothing was stored.")
        question_id = str(row["question_id"])
        traj_id = row.get("trajectory_id") or trajectory_id(question_id, row["value"])
        records.append(
            StepRecord(
                record_id=row.get("id") or record_id(traj_id, int(row["step_index"])),
                key=str(row["key"] or ""),
                value=row["value"],
                reward=float(row["reward"]),
                question_id=question_id,
                step_index=int(row["step_index"]),
                num_steps=int(row.get("num_steps") or 0),
                source=str(row.get("source") or "dataset"),
                trajectory_id=traj_id,
                created_at=str(row.get("created_at") or ""),
            )
        )
        # Chroma metadata holds scalars only; other extra columns are not carried over.
        extra_metadata.append(
            {k: v for k, v in row.items() if k not in known and isinstance(v, (str, int, float, bool))}
        )
    embeddings = None
    if "embedding" in ds.column_names and _same_embedder(ds, store.embedder):
        embeddings = np.asarray(ds.with_format("numpy")["embedding"], dtype=np.float32)
    # Keep each question's records together so batches do not split questions.
    order = sorted(range(len(records)), key=lambda i: records[i].question_id)
    records = [records[i] for i in order]
    extra_metadata = [extra_metadata[i] for i in order]
    if embeddings is not None:
        embeddings = embeddings[order]
    return store.add_records(records, embeddings=embeddings, extra_metadata=extra_metadata)


def _same_embedder(ds, embedder) -> bool:
    if "embedder" not in ds.column_names or len(ds) == 0:
        return False
    names = set(ds["embedder"])
    dimension = len(ds[0]["embedding"])
    return names == {embedder.name} and dimension == embedder.dimension
