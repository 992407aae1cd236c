"""Between trace stores and ``datasets.Dataset``: trajectories in, step records out and back in."""

from __future__ import annotations

import dataclasses
import logging
import re

import numpy as np

from rapo_trl.store.backend import KEY_SYSTEM_PROMPT
from rapo_trl.store.duplicate_ids import check_unique_ids, dataset_origin
from rapo_trl.store.index_settings import INDEX_COLUMNS, index_config, store_index_settings
from rapo_trl.store.steps import StepRecord
from rapo_trl.store.tool_tags import METADATA_KEY as TOOL_TAGS_COLUMN
from rapo_trl.store.tool_tags import record_tool_tags

logger = logging.getLogger(__name__)

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
KEY_MAX_CHARS_COLUMN = "key_max_chars"
"""The length the exported keys were cut to: queries must be cut to it too, so it travels with them."""
EXPORT_OWN_COLUMNS = ("id", "key", "embedding", TOOL_TAGS_COLUMN, KEY_MAX_CHARS_COLUMN, KEY_SYSTEM_PROMPT,
                      *INDEX_COLUMNS)
"""Columns an export fills from the record and the store, not from metadata: extra metadata under one of these names
would replace them (every exported key or id the metadata's value), so it is refused when written."""


def check_extra_metadata(extra_metadata) -> None:
    """Refuse extra record metadata named like a column an export fills itself (``EXPORT_OWN_COLUMNS``)."""
    clashes = sorted({name for metadata in extra_metadata for name in metadata if name in EXPORT_OWN_COLUMNS})
    if clashes:
        raise ValueError(f"Record metadata may not be named {clashes}: an export of the store writes its own "
                         f"{', '.join(EXPORT_OWN_COLUMNS)} columns. Rename them; nothing was stored.")


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
    tool_tags=None,
) -> int:
    """Store a dataset of tagged trajectories (one row each); returns the number of records added.

    ``prompt_column`` holds the question text or chat messages that prefix every key; ``"auto"`` uses
    ``prompt`` or ``question`` when present, ``None`` uses no prompt. ``source_column`` (optional)
    gives each row its own source, otherwise ``source`` applies to all. ``tool_tags``: the tags of the tools the
    trajectories call, each call one step (``TraceStore.add_trajectories``). ``question_column`` must hold the ids
    of the training rows the trajectories answer (their ``question_id``: ``to_rapo_rows`` adds one, the
    ``rapo_trl.tasks.question_id_of`` of the question text unless the dataset has its own): retrieval of a row's own question and
    the SFT warm start find a record by it.
    """
    if prompt_column == "auto":
        prompt_column = next((c for c in ("prompt", "question") if c in ds.column_names), None)
    columns = [text_column, reward_column, question_column]
    columns += [c for c in (prompt_column, source_column) if c is not None]
    require_columns(ds, columns, "trajectory")
    prompts = ds[prompt_column] if prompt_column is not None else None
    if source_column is None:
        return store.add_trajectories(
            ds[text_column], ds[reward_column], ds[question_column], source, keep_top_k, prompts, on_invalid,
            tool_tags=tool_tags,
        )
    # Per-row sources: validate everything first and keep the top k of each question over all its sources (a
    # question answered by two agents still keeps k trajectories, not k per agent), then write each source's rows.
    from rapo_trl.store.ingest import keep_top_k as top_k_per_question
    from rapo_trl.store.ingest import validate_trajectories

    rows, _ = validate_trajectories(ds[text_column], ds[reward_column], ds[question_column], prompts, on_invalid)
    kept = sorted(row.position for row in top_k_per_question(rows, keep_top_k))
    sources = [str(s) for s in ds[source_column]]
    added = 0
    for name in dict.fromkeys(sources[i] for i in kept):
        subset = ds.select([i for i in kept if sources[i] == name])
        added += store.add_trajectories(
            subset[text_column],
            subset[reward_column],
            subset[question_column],
            name,
            None,  # the top k of each question is already chosen
            subset[prompt_column] if prompt_column is not None else None,
            on_invalid,
            tool_tags=tool_tags,
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
    # Where the steps are cut travels with them, so a store rebuilt from the export cuts its later writes there too.
    data[TOOL_TAGS_COLUMN] = [",".join(store.tool_tags)] * len(order)
    data[KEY_MAX_CHARS_COLUMN] = [int(store.config.key_max_chars)] * len(order)
    if store.config.system_prompt:
        data[KEY_SYSTEM_PROMPT] = [store.config.system_prompt] * len(order)
    for column, value in store_index_settings(store).items():
        data[column] = [value] * len(order)
    if include_embeddings:
        data["embedding"] = [embeddings[i].tolist() for i in order]
    return Dataset.from_dict(data)


def add_records_from_dataset(store, ds, origin: str | None = None) -> int:
    """Write the records of an exported dataset into ``store``; reuses its ``embedding`` column when
    it was made by the store's embedder, otherwise re-embeds the keys. ``origin`` (default: the dataset's files) is
    what an error names as the records' source. Records repeating an id are refused before any is written."""
    require_columns(ds, _REQUIRED_RECORD_COLUMNS, "trace-record")
    check_key_length(ds, store.config.key_max_chars, f"store at {store.location}")
    # What the collection records is what a reopened store cuts from its queries (not this object's config alone).
    check_system_prompt(ds, (store.collection.metadata or {}).get(KEY_SYSTEM_PROMPT), f"store at {store.location}")
    from rapo_trl.store.steps import record_id, reward_problem, trajectory_id

    records = []
    extra_metadata = []
    known = set(RECORD_COLUMNS) | set(EXPORT_OWN_COLUMNS)
    for index, row in enumerate(ds):
        if (problem := reward_problem(row["reward"])) is not None:
            raise ValueError(f"Record row {index}: reward {problem}; nothing was stored.")
        if not isinstance(row["value"], str) or not row["value"].strip():
            raise ValueError(f"Record row {index}: value is empty; nothing was stored.")
        if row["question_id"] is None or not str(row["question_id"]).strip():
            raise ValueError(f"Record row {index}: question_id is empty; nothing was stored.")
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
    check_unique_ids((record.record_id for record in records), origin or dataset_origin(ds))
    embeddings = None
    if "embedding" in ds.column_names and _same_embedder(ds, store.embedder):
        embeddings = np.asarray(ds.with_format("numpy")["embedding"], dtype=np.float32)
    # Keep each question's records together so batches do not split questions.
    order = sorted(range(len(records)), key=lambda i: records[i].question_id)
    records = [records[i] for i in order]
    extra_metadata = [extra_metadata[i] for i in order]
    if embeddings is not None:
        embeddings = embeddings[order]
    added = store.add_records(records, embeddings=embeddings, extra_metadata=extra_metadata)
    if TOOL_TAGS_COLUMN in ds.column_names and len(ds):
        cut_at = [tag for value in dict.fromkeys(ds[TOOL_TAGS_COLUMN]) for tag in str(value or "").split(",") if tag]
        uncut = [tag for tag in store.tool_tags if tag not in cut_at]
        if uncut and added:
            # The records come cut where their store cut them; this one says its steps end at these tools too, so a
            # trainer running them is not told that an imported step can run past their calls.
            logger.warning("%d imported records were cut at the tools %s only, but %r cuts its steps at %s too: an "
                           "imported step can run past a call of those tools.", added, ", ".join(cut_at),
                           store, ", ".join(uncut))
        record_tool_tags(store.collection, cut_at, store._stored_metadata())
    return added


def exported_key_length(ds) -> int | None:
    """The length an exported dataset's keys were cut to; ``None`` for an export that does not record it. Records cut
    to several lengths are refused (``KeySettingsMismatchError``)."""
    if KEY_MAX_CHARS_COLUMN not in ds.column_names or len(ds) == 0:
        return None
    lengths = {int(length) for length in ds[KEY_MAX_CHARS_COLUMN] if length is not None}
    _one_way([f"to their last {length} characters" for length in sorted(lengths)])
    return lengths.pop() if lengths else None


def _one_way(ways: list[str]) -> None:
    """Refuse records whose keys were cut in more than one way (exports of several stores joined): a store cuts its
    queries one way, so they would miss the keys cut another."""
    from rapo_trl.store.errors import KeySettingsMismatchError

    if len(ways) > 1:
        raise KeySettingsMismatchError(
            f"The records' keys were cut in more than one way ({' and '.join(ways)}): a store cuts its queries one "
            "way, which would not match the others' keys. Rebuild each store's records into a store of its own.")


def config_for_records(ds, config):
    """``config`` (default: ``StoreConfig()``) cutting queries as the exported keys were cut and indexing as the exported
    store did: a store rebuilt from an export keeps its key length, or its queries would never match its keys, and its
    index settings (``index_settings.index_config``). Another length given is refused."""
    from rapo_trl.store.config import StoreConfig

    config = index_config(ds, config or StoreConfig())
    cut = exported_system_prompt(ds)
    if cut is not None and config.system_prompt is None:
        # Keys cut of a system prompt: the store the collection records it in cuts it from queries too.
        config = dataclasses.replace(config, system_prompt=cut)
    check_system_prompt(ds, config.system_prompt, "StoreConfig given")
    recorded = exported_key_length(ds)
    if recorded is None or config.key_max_chars == recorded:
        return config
    if config.key_max_chars == StoreConfig.key_max_chars:
        return dataclasses.replace(config, key_max_chars=recorded)
    check_key_length(ds, config.key_max_chars, "StoreConfig given")
    return config


def exported_system_prompt(ds) -> str | None:
    """The system prompt an exported dataset's keys were cut of; ``None`` for keys cut of none. Records cut of several
    (or of one and of none) are refused (``KeySettingsMismatchError``)."""
    if KEY_SYSTEM_PROMPT not in ds.column_names or len(ds) == 0:
        return None
    prompts = {prompt or None for prompt in ds[KEY_SYSTEM_PROMPT]}
    _one_way([f"of the system prompt {prompt[:40]!r}..." if prompt else "of no system prompt"
              for prompt in sorted(prompts, key=str)])
    return prompts.pop()


def check_system_prompt(ds, system_prompt: str | None, what: str) -> None:
    """Refuse records whose keys were cut of a system prompt that ``what`` does not cut from its queries."""
    from rapo_trl.store.errors import KeySettingsMismatchError

    cut = exported_system_prompt(ds)
    if cut is not None and system_prompt != cut:
        given = "cuts none" if system_prompt is None else f"cuts {system_prompt[:40]!r}..."
        raise KeySettingsMismatchError(
            f"The records' keys were cut of the system prompt {cut[:40]!r}..., but the {what} {given}: queries cut "
            "otherwise would not match them. Rebuild them into a store with system_prompt unset, in a new folder or "
            "collection.")


def check_key_length(ds, key_max_chars: int, what: str) -> None:
    """Refuse records whose keys were cut to another length than ``what`` cuts its queries to."""
    from rapo_trl.store.errors import KeySettingsMismatchError

    recorded = exported_key_length(ds)
    if recorded is not None and recorded != key_max_chars:
        raise KeySettingsMismatchError(
            f"The records' keys were cut to their last {recorded} characters, but the {what} cuts to "
            f"{key_max_chars}: queries cut otherwise would not match them. Rebuild them into a store with "
            f"StoreConfig(key_max_chars={recorded}) (or leave it unset), in a new folder or collection.")


def _same_embedder(ds, embedder) -> bool:
    if "embedder" not in ds.column_names or len(ds) == 0:
        return False
    names = set(ds["embedder"])
    dimension = len(ds[0]["embedding"])
    return names == {embedder.name} and dimension == embedder.dimension


# ---------------------------------------------------------------------- the Hub (and a local folder)

DATA_DIR = "data"
SHARD_ROWS = 100_000
SHARD_NAME = re.compile(r"train-\d{5}-of-\d{5}\.parquet")
"""The name of a shard ``export_to_folder`` writes (replaced by a later export into the same folder)."""


def export_to_folder(store, folder, include_embeddings: bool = True, shard_rows: int = SHARD_ROWS):
    """Write the store as a Hub-style dataset folder: ``data/train-*.parquet`` plus a dataset card
    (``README.md``). ``datasets.load_dataset(folder)`` reads it back, exactly as it reads the pushed repo."""
    from pathlib import Path

    folder = Path(folder)
    # The reader (and the card's data_files) takes every data/*.parquet: an earlier export's shards left beside
    # this one's would bring their records (deleted since, or another store's) into a store rebuilt from the folder.
    earlier = sorted((folder / DATA_DIR).glob("*.parquet"))
    foreign = [path.name for path in earlier if not SHARD_NAME.fullmatch(path.name)]
    if foreign:
        raise ValueError(f"{folder / DATA_DIR} holds parquet files no export wrote ({', '.join(foreign)}); a store "
                         "rebuilt from the folder would read their rows as records. Export into another folder.")
    ds = to_dataset(store, include_embeddings)
    if len(ds) == 0:
        raise ValueError(f"{store!r} holds no records; there is nothing to export")
    for path in earlier:
        path.unlink()
    (folder / DATA_DIR).mkdir(parents=True, exist_ok=True)
    shards = max(1, -(-len(ds) // shard_rows))
    for index in range(shards):
        shard = ds.shard(num_shards=shards, index=index, contiguous=True)
        shard.to_parquet(str(folder / DATA_DIR / f"train-{index:05d}-of-{shards:05d}.parquet"))
    dataset_card(store, ds).save(str(folder / "README.md"))
    return folder


def dataset_card(store, ds=None):
    """A ``huggingface_hub.DatasetCard``: records, questions, embedder, source agents, reward histogram."""
    from huggingface_hub import DatasetCard, DatasetCardData

    stats = store.stats()
    data = DatasetCardData(
        tags=["rapo", "rapo_trl", "trace-store", "agent-trajectories"],
        task_categories=["text-generation"],
        configs=[{"config_name": "default", "data_files": [{"split": "train", "path": f"{DATA_DIR}/*.parquet"}]}],
    )
    counts, edges = stats["reward_histogram"]["counts"], stats["reward_histogram"]["edges"]
    histogram = "\n".join(
        f"| [{edges[i]:.3g}, {edges[i + 1]:.3g}{']' if i == len(counts) - 1 else ')'} | {count} |"
        for i, count in enumerate(counts)
    )
    sources = "\n".join(f"| {name} | {count} |" for name, count in sorted(stats["sources"].items()))
    has_embeddings = ds is not None and "embedding" in ds.column_names
    body = f"""---
{data.to_yaml()}
---

# RAPO step-trace store

Step records of agent trajectories for Retrieval-Augmented Policy Optimization
([arXiv:2603.03078](https://arxiv.org/abs/2603.03078)), exported from a `rapo_trl` `TraceStore`
(collection `{stats['collection']}`). Each row is one agent step: `key` is the preprocessed context before the
step (what is embedded and searched), `value` is the step's text with its tool result (what a hybrid rollout
receives), `reward` is the whole trajectory's outcome reward.

| | |
|---|---|
| records (steps) | {stats['records']} |
| questions | {stats['questions']} |
| trajectories | {stats['trajectories']} |
| mean reward | {stats['reward_mean'] if stats['reward_mean'] is None else f"{stats['reward_mean']:.4f}"} |
| embedder | `{stats['embedder']}` ({stats['dimension']}-d){', vectors in the `embedding` column' if has_embeddings else ''} |

## Source agents

| source | records |
|---|---|
{sources}

## Reward histogram

| reward | records |
|---|---|
{histogram}

## Use

```python
from rapo_trl import TraceStore

store = TraceStore.from_hub("<this repo>", "runs/store")   # a local Chroma store; keys are re-embedded
                                                          # only if your embedder differs from the one above
```
"""
    return DatasetCard(body)


def load_records(repo_or_folder, revision: str | None = None, token=None):
    """The records dataset of a pushed store (a Hub repo id, via ``load_dataset``) or of a folder
    ``export_to_folder`` wrote (its parquet files as they are now)."""
    from pathlib import Path

    folder = Path(str(repo_or_folder))
    if folder.is_dir():
        return _read_exported_folder(folder)
    from datasets import load_dataset

    return load_dataset(str(repo_or_folder), split="train", revision=revision, token=token)


def _read_exported_folder(folder):
    # Not through load_dataset: its cache names a local folder's dataset by the folder's name alone, so a folder
    # exported after another of the same name (elsewhere, or the same one again) would load the older records.
    import pyarrow as pa
    import pyarrow.parquet as pq
    from datasets import Dataset
    from datasets.table import InMemoryTable

    files = sorted((folder / DATA_DIR).glob("*.parquet"))
    if not files:
        raise ValueError(f"{folder} holds no {DATA_DIR}/*.parquet: it is not a folder TraceStore.export_to_folder "
                         "wrote (a Hub repo id is read from the Hub)")
    check_all_shards(folder, [file.name for file in files])
    return Dataset(InMemoryTable(pa.concat_tables([pq.read_table(file) for file in files])))


def check_all_shards(folder, names) -> None:
    """Refuse a folder holding some of the shards an export's names count (``train-00000-of-00003.parquet``: one of
    three): an export killed between shards, or a copy cut short, would otherwise read as a smaller store."""
    counts = {int(name[len("train-00000-of-"):-len(".parquet")]) for name in names if SHARD_NAME.fullmatch(name)}
    missing = sorted({f"train-{index:05d}-of-{count:05d}.parquet" for count in counts for index in range(count)}
                     - set(names))
    if missing:
        raise ValueError(f"{folder / DATA_DIR} lacks {', '.join(missing)}: its records are not all there (an export "
                         "stopped part way, or a copy cut short). Export the store into it again.")


def push_to_hub(store, repo_id: str, private: bool | None = None, token=None, include_embeddings: bool = True,
                commit_message: str = "Upload RAPO trace store") -> str:
    """Upload the store as a dataset repo (parquet + card) and return its URL."""
    import tempfile

    from huggingface_hub import HfApi

    api = HfApi(token=token)
    with tempfile.TemporaryDirectory(prefix="rapo-store-") as folder:
        export_to_folder(store, folder, include_embeddings)
        url = api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        # upload_folder deletes nothing unless told: shards of an earlier push with more of them would stay in the
        # repo, and from_hub (data/*.parquet) would load their records beside these.
        api.upload_folder(folder_path=folder, repo_id=url.repo_id, repo_type="dataset",
                          commit_message=commit_message, delete_patterns=[f"{DATA_DIR}/*.parquet"])
    return f"https://huggingface.co/datasets/{url.repo_id}"


def store_stats(store, bins: int = 10) -> dict:
    """``TraceStore.stats``: records, questions, trajectories, sources, a reward histogram, the embedder, and (an
    embedded store) ``folder_bytes``, the size of its whole folder, with ``folder_collections``, the collections
    that share it."""
    from rapo_trl.store.backend import collection_names, directory_size

    rewards, questions, trajectories, sources = [], set(), set(), {}
    for page in store.iter_batches():
        for metadata in page["metadatas"]:
            rewards.append(float(metadata["reward"]))
            questions.add(metadata["question_id"])
            trajectories.add(metadata.get("trajectory_id"))
            sources[metadata["source"]] = sources.get(metadata["source"], 0) + 1
    counts, edges = np.histogram(rewards, bins=bins) if rewards else (np.zeros(0), np.zeros(0))
    return {
        "records": len(rewards),
        "questions": len(questions),
        "trajectories": len(trajectories),
        "sources": sources,
        "reward_mean": float(np.mean(rewards)) if rewards else None,
        "reward_histogram": {"counts": counts.astype(int).tolist(), "edges": [float(e) for e in edges]},
        "embedder": store.embedder.name,
        "dimension": int(store.embedder.dimension),
        "collection": store.collection_name,
        "location": store.location,
        # The folder's size, not the collection's: Chroma keeps every collection of a folder in one database file.
        "folder_bytes": directory_size(store.path) if store.path is not None else None,
        "folder_collections": collection_names(store.client) if store.path is not None else None,
        "index": (store.collection.configuration or {}).get("hnsw"),
    }
