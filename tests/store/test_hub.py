"""The store through the Hub as a dataset: parquet + card out, ``load_dataset`` back in. Offline, the
exported folder is what ``push_to_hub`` uploads and ``from_hub`` reads a folder as it reads a repo."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from rapo_trl.embeddings import HashingEmbedder
from rapo_trl.store import TraceStore


def _records(store):
    ds = store.to_dataset(include_embeddings=False)
    return sorted(zip(ds["id"], ds["key"], ds["value"], ds["reward"], ds["source"]))


def test_export_writes_parquet_and_a_card(source_store, tmp_path):
    folder = source_store.export_to_folder(tmp_path / "export")
    assert [p.name for p in (folder / "data").iterdir()] == ["train-00000-of-00001.parquet"]
    text = (folder / "README.md").read_text()
    meta = yaml.safe_load(text.split("---\n")[1])
    assert "rapo" in meta["tags"] and meta["configs"][0]["data_files"][0]["path"] == "data/*.parquet"
    assert "| records (steps) | 7 |" in text and "| questions | 2 |" in text
    assert "`test-hashing-128` (128-d)" in text and "| scripted-expert | 7 |" in text
    assert "## Reward histogram" in text and "| [0, 0.1) | 2 |" in text  # the 0-reward trajectory's 2 steps


def test_round_trip_through_a_folder_reuses_the_vectors(source_store, embedder, tmp_path):
    folder = source_store.export_to_folder(tmp_path / "export")
    calls = len(embedder.calls)
    copy = TraceStore.from_hub(folder, tmp_path / "copy", embedder=embedder)
    assert len(embedder.calls) == calls  # same embedder: stored vectors reused, nothing embedded
    assert _records(copy) == _records(source_store)
    query = "What is 12*7?\n<think>I need to multiply twelve by seven (attempt 0).</think>"
    assert copy.select([query])[0].record_id == source_store.select([query])[0].record_id


def test_from_hub_with_another_embedder_embeds_the_keys_again(source_store, tmp_path):
    folder = source_store.export_to_folder(tmp_path / "export")
    other = HashingEmbedder(32, name="other-32")
    copy = TraceStore.from_hub(folder, tmp_path / "copy", embedder=other)
    assert copy.embedder.name == "other-32" and len(copy) == 7


def test_push_to_hub_uploads_the_exported_folder(source_store, tmp_path, monkeypatch):
    """Only the network is replaced: the upload lands in a folder that from_hub then reads."""
    remote = tmp_path / "remote"
    calls = {}

    class FakeApi:
        def __init__(self, token=None):
            calls["token"] = token

        def create_repo(self, repo_id, repo_type, private, exist_ok):
            calls["create"] = (repo_id, repo_type, private)
            return type("RepoUrl", (), {"repo_id": repo_id})()

        def upload_folder(self, folder_path, repo_id, repo_type, commit_message, **kwargs):
            shutil.copytree(folder_path, remote)

    monkeypatch.setattr("huggingface_hub.HfApi", FakeApi)
    url = source_store.push_to_hub("me/traces", private=True, token="t")
    assert url == "https://huggingface.co/datasets/me/traces"
    assert calls == {"token": "t", "create": ("me/traces", "dataset", True)}
    assert _records(TraceStore.from_hub(remote, tmp_path / "copy", embedder=source_store.embedder)) \
        == _records(source_store)


def test_an_empty_store_is_not_exported(make_store, tmp_path):
    with pytest.raises(ValueError, match="no records"):
        make_store("empty").export_to_folder(tmp_path / "export")


def test_from_hub_missing_folder_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        TraceStore.from_hub(tmp_path / "nowhere", tmp_path / "copy", embedder=HashingEmbedder(16))


def test_each_exported_folder_loads_its_own_records_and_tool_tags(make_store, trajectory, embedder, tmp_path):
    # Two stores exported to folders of the same name: datasets' cache keyed such a folder by its name alone, so
    # the second import returned the first store's records.
    for name, questions, tags in (("first", 1, None), ("second", 3, ["calc"])):
        store = make_store(name)
        store.add_trajectories([trajectory(str(i)) for i in range(questions)], [1.0] * questions,
                               [f"q{i}" for i in range(questions)], prompts=["What is 12*7?"] * questions,
                               tool_tags=tags)
        folder = store.export_to_folder(tmp_path / name / "export")
        copy = TraceStore.from_hub(folder, tmp_path / name / "copy", embedder=embedder)
        assert _records(copy) == _records(store)
        assert copy.tool_tags == store.tool_tags  # later writes are cut where the source's were
        from_records = TraceStore.from_dataset(store.to_dataset(), tmp_path / name / "again", embedder=embedder)
        assert from_records.tool_tags == store.tool_tags
    assert copy.tool_tags == ("python", "search", "calc")


def test_a_folder_that_no_export_wrote_is_named(tmp_path):
    (tmp_path / "other").mkdir()
    with pytest.raises(ValueError, match="not a folder TraceStore.export_to_folder wrote"):
        TraceStore.from_hub(tmp_path / "other", tmp_path / "copy", embedder=HashingEmbedder(16))


def test_a_store_rebuilt_from_an_export_cuts_queries_as_its_keys_were(make_store, trajectory, embedder, tmp_path):
    """Keys cut to 40 characters stay searchable by queries cut to 40, not to the default length."""
    from rapo_trl.store import KeySettingsMismatchError, StoreConfig

    short = make_store("short", key_max_chars=40)
    short.add_trajectories([trajectory("1", tools=2)], [1.0], ["q1"], prompts=["What is 12*7? Show the product."])
    folder = short.export_to_folder(tmp_path / "export")
    copy = TraceStore.from_hub(folder, tmp_path / "copy", embedder=embedder)
    assert copy.config.key_max_chars == 40 and copy.collection.metadata["key_max_chars"] == 40
    assert _records(copy) == _records(short)
    with pytest.raises(KeySettingsMismatchError, match="cut to their last 40 characters"):
        TraceStore.from_hub(folder, tmp_path / "other", embedder=embedder, config=StoreConfig(key_max_chars=100))
    default = make_store("default")  # a collection of the default length cannot take keys cut to 40
    default.close()
    with pytest.raises(KeySettingsMismatchError):
        TraceStore.from_hub(folder, tmp_path / "default", embedder=embedder)


def test_a_store_rebuilt_from_an_export_cuts_the_system_prompt_its_keys_were_cut_of(make_store, trajectory, embedder,
                                                                                      tmp_path):
    instructions = "Solve it with the Python tool and box the answer. " * 4
    plain = f"{instructions}\n\nQuestion: What is 12*7?\n"
    cut = make_store("cut", system_prompt=instructions)
    cut.add_trajectories([trajectory("1", tools=2)], [1.0], ["q1"], prompts=[plain])
    copy = TraceStore.from_hub(cut.export_to_folder(tmp_path / "export"), tmp_path / "copy", embedder=embedder)
    assert copy.config.system_prompt == instructions
    assert copy.collection.metadata["key_system_prompt"] == instructions
    assert copy.select([plain])[0].similarity == pytest.approx(1.0, abs=1e-5)


def test_a_store_rebuilt_from_an_export_refuses_another_system_prompt(make_store, trajectory, embedder, tmp_path):
    """Keys cut of one system prompt are not rebuilt into a store that cuts another (or none) from its queries: the
    queries would keep the instructions the keys lack, and no error would say so."""
    from rapo_trl.store import KeySettingsMismatchError, StoreConfig

    instructions = "Solve it with the Python tool and box the answer. " * 4
    cut = make_store("cut", system_prompt=instructions)
    cut.add_trajectories([trajectory("1", tools=2)], [1.0], ["q1"], prompts=[f"{instructions}\nWhat is 12*7?"])
    folder = cut.export_to_folder(tmp_path / "export")
    with pytest.raises(KeySettingsMismatchError, match="cut of the system prompt"):
        TraceStore.from_hub(folder, tmp_path / "other", embedder=embedder,
                            config=StoreConfig(system_prompt="Another prompt."))
    plain = make_store("plain")  # a collection that records no system prompt: its reopened queries would cut none
    plain.close()
    with pytest.raises(KeySettingsMismatchError, match="cuts none"):
        TraceStore.from_hub(folder, tmp_path / "plain", embedder=embedder)


def test_exporting_again_into_a_folder_leaves_none_of_the_earlier_shards(make_store, trajectory, embedder, tmp_path):
    # The reader takes every data/*.parquet: an earlier export's shards that this one does not overwrite (it had
    # more) would bring back records deleted since, or another store's, into the rebuilt store.
    from rapo_trl.store.dataset_io import export_to_folder

    store = make_store()
    store.add_trajectories([trajectory(str(i)) for i in range(4)], [1.0] * 4, [f"q{i}" for i in range(4)],
                           prompts=["What is 12*7?"] * 4)
    export_to_folder(store, tmp_path / "export", shard_rows=3)
    assert len(list((tmp_path / "export" / "data").glob("*.parquet"))) == 3
    store.delete({"question_id": "q0"})
    folder = export_to_folder(store, tmp_path / "export")
    assert [p.name for p in (folder / "data").iterdir()] == ["train-00000-of-00001.parquet"]
    copy = TraceStore.from_hub(folder, tmp_path / "copy", embedder=embedder)
    assert _records(copy) == _records(store) and "q0" not in copy.to_dataset(include_embeddings=False)["question_id"]


def test_an_export_refuses_a_data_folder_holding_parquet_files_it_did_not_write(source_store, tmp_path):
    (tmp_path / "export" / "data").mkdir(parents=True)
    (tmp_path / "export" / "data" / "mine.parquet").write_bytes(b"")
    with pytest.raises(ValueError, match="mine.parquet"):
        source_store.export_to_folder(tmp_path / "export")
    assert [p.name for p in (tmp_path / "export" / "data").iterdir()] == ["mine.parquet"]


def test_push_to_hub_replaces_the_shards_of_an_earlier_push(source_store, make_store, trajectory, embedder, tmp_path,
                                                           monkeypatch):
    # upload_folder adds and overwrites files but deletes none unless told to: a repo pushed before with more shards
    # would keep them, and from_hub (data/*.parquet) would load their records beside the new ones.
    from rapo_trl.store.dataset_io import export_to_folder

    earlier = make_store("earlier")
    earlier.add_trajectories([trajectory(str(i)) for i in range(4)], [1.0] * 4, [f"e{i}" for i in range(4)],
                             prompts=["What is 6*7?"] * 4)
    remote = export_to_folder(earlier, tmp_path / "remote", shard_rows=3)  # the repo as the earlier push left it

    class FakeApi:
        """The Hub's upload_folder on a folder: files matching delete_patterns go, but not those uploaded now."""

        def __init__(self, token=None):
            pass

        def create_repo(self, repo_id, repo_type, private, exist_ok):
            return type("RepoUrl", (), {"repo_id": repo_id})()

        def upload_folder(self, folder_path, repo_id, repo_type, commit_message, delete_patterns=None, **kwargs):
            import fnmatch

            uploaded = {p.relative_to(folder_path).as_posix() for p in Path(folder_path).rglob("*") if p.is_file()}
            for path in [p for p in remote.rglob("*") if p.is_file()]:
                name = path.relative_to(remote).as_posix()
                if name not in uploaded and any(fnmatch.fnmatch(name, pattern) for pattern in delete_patterns or ()):
                    path.unlink()
            shutil.copytree(folder_path, remote, dirs_exist_ok=True)

    monkeypatch.setattr("huggingface_hub.HfApi", FakeApi)
    source_store.push_to_hub("me/traces")
    copy = TraceStore.from_hub(remote, tmp_path / "copy", embedder=embedder)
    assert _records(copy) == _records(source_store)


@pytest.mark.parametrize("kept", [[0], [0, 2]])
def test_a_folder_short_of_some_of_its_export_shards_is_refused(source_store, tmp_path, kept):
    """An export killed between shards (after it removed the earlier ones) or a copy cut short holds some of the
    shards the names count: read as they are, they would rebuild a store short of the others' records, with no error."""
    from rapo_trl.store.dataset_io import export_to_folder

    folder = export_to_folder(source_store, tmp_path / "export", shard_rows=3)
    shards = sorted((folder / "data").glob("*.parquet"))
    assert [p.name for p in shards] == [f"train-0000{i}-of-00003.parquet" for i in range(3)]
    for index, shard in enumerate(shards):
        if index not in kept:
            shard.unlink()
    missing = ", ".join(shards[i].name for i in range(3) if i not in kept)
    with pytest.raises(ValueError, match=f"lacks {missing}"):
        TraceStore.from_hub(folder, tmp_path / "copy", embedder=HashingEmbedder(16))
    assert not (tmp_path / "copy").exists()
