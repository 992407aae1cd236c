"""Server mode: a `chroma run` subprocess shared by clients through TraceStore.connect."""

from __future__ import annotations

import pytest

from rapo_trl.store import EmbedderMismatchError, StoreConfig, TraceStore
from tests.helpers.chroma_server import free_port

pytestmark = pytest.mark.server


def test_a_server_reader_is_refused_a_collection_that_is_not_there(chroma_server, embedder):
    from rapo_trl.store import MissingCollectionError

    with pytest.raises(MissingCollectionError, match="no collection 'never-built'"):
        TraceStore.connect("127.0.0.1", chroma_server.port, collection="never-built", embedder=embedder, must_exist=True)
    assert len(TraceStore.connect("127.0.0.1", chroma_server.port, collection="never-built", embedder=embedder)) == 0


def test_server_store_is_shared_between_clients(chroma_server, embedder, trajectory):
    config = StoreConfig(show_progress=False)
    writer = TraceStore.connect(
        "127.0.0.1", chroma_server.port, collection="shared", embedder=embedder, config=config
    )
    assert (
        writer.add_trajectories(
            [trajectory("1"), trajectory("2")], [1.0, -1.0], ["q1", "q2"], prompts=["What is 12*7?", "Other?"]
        )
        == 4
    )
    reader = TraceStore.connect(
        "127.0.0.1", chroma_server.port, collection="shared", embedder=embedder, config=config
    )
    assert len(reader) == 4
    got = reader.select(["What is 12*7?", "Other?"], top_k=1)
    assert got[0].question_id == "q1" and got[0].reward == 1.0 and got[1].is_fallback
    stats = reader.stats()
    assert (
        stats["records"] == 4
        and stats["folder_bytes"] is None and stats["folder_collections"] is None
        and stats["location"].endswith(str(chroma_server.port))
    )
    assert reader.describe() == {"location": f"127.0.0.1:{chroma_server.port}", "server": True, "collection": "shared",
                                 "records": 4, "embedder": "test-hashing-128"}
    from rapo_trl.embeddings import HashingEmbedder

    with pytest.raises(EmbedderMismatchError, match="was built with embedder 'test-hashing-128'"):
        TraceStore.connect("127.0.0.1", chroma_server.port, collection="shared", embedder=HashingEmbedder(16))


def test_connect_to_nothing_fails_clearly(embedder):
    with pytest.raises(ConnectionError, match=r"Cannot reach the Chroma server at 127\.0\.0\.1:"):
        TraceStore.connect("127.0.0.1", free_port(), embedder=embedder)


def test_server_reader_sees_records_written_after_its_reward_map_warmed(chroma_server, embedder, trajectory):
    config = StoreConfig(show_progress=False)  # top 3: the two step-0 keys are the same text
    writer = TraceStore.connect(
        "127.0.0.1", chroma_server.port, collection="maps", embedder=embedder, config=config
    )
    reader = TraceStore.connect(
        "127.0.0.1", chroma_server.port, collection="maps", embedder=embedder, config=config
    )
    writer.add_trajectories([trajectory("1")], [-1.0], ["q1"], prompts=["What is 12*7?"])
    assert reader.select(["What is 12*7?"])[0].is_fallback  # its map now holds the -1 record
    # the same question, solved again, better: new ids the reader has never seen
    writer.add_trajectories([trajectory("84", tools=2)], [1.0], ["q1"], prompts=["What is 12*7?"])
    got = reader.select(["What is 12*7?"])[0]
    assert not got.is_fallback and got.reward == 1.0 and got.question_id == "q1"


def test_two_writers_of_a_server_store_keep_each_others_tool_tags(chroma_server, embedder, trajectory):
    """A writer opened before another recorded a tool tag cuts its own steps at that tag too, and recording its own
    tag keeps the other's: it reads the collection's tags as stored now, not as it opened the collection."""
    config = StoreConfig(show_progress=False)
    first, second = (TraceStore.connect("127.0.0.1", chroma_server.port, embedder=embedder, config=config)
                     for _ in range(2))
    first.add_trajectories([trajectory("1")], [1.0], ["q1"], prompts=["Q one"], tool_tags=["calc"])
    assert second.tool_tags == ("python", "search", "calc")
    calc = "<think>a</think><calc>1+1</calc><result>2</result><think>b</think><answer>2</answer>"
    assert second.add_trajectories([calc], [1.0], ["q2"], prompts=["Q two"]) == 2  # cut at </calc>
    second.add_trajectories([trajectory("3")], [1.0], ["q3"], prompts=["Q three"], tool_tags=["web"])
    third = TraceStore.connect("127.0.0.1", chroma_server.port, embedder=embedder, config=config)
    assert third.tool_tags == ("python", "search", "calc", "web")
