"""A real `chroma run` server killed mid-run (SIGKILL) and started again, while a tiny-model RAPO run trains."""

from __future__ import annotations

import logging

import pytest
from transformers import TrainerCallback

from rapo_trl.embeddings import HashingEmbedder
from rapo_trl.store import StoreConfig, TraceStore
from rapo_trl.trainer.resilience.store_outage import StoreUnavailableError
from tests.helpers.chroma_server import ChromaServer, chroma_executable
from tests.helpers.trainers import rapo_trainer, script

pytestmark = [pytest.mark.server, pytest.mark.skipif(chroma_executable() is None, reason="no `chroma` executable")]

STEP = "<think>Call python with 7.</think>\n<python>print(7)</python>\n<result>\n7\n</result>\n"


@pytest.fixture
def server(tmp_path):
    server = ChromaServer(tmp_path / "server-db").start()
    yield server
    server.stop()


def _store(server) -> TraceStore:
    store = TraceStore.connect("127.0.0.1", server.port, collection="steps", embedder=HashingEmbedder(64, name="h64"),
                               config=StoreConfig(show_progress=False))
    store.add_trajectories([STEP + "<answer>7</answer>"], [1.0], ["q0"], prompts=["Compute 0"])
    return store


class Chaos(TrainerCallback):
    """Scripts each step's generation; after the steps in ``actions`` runs what they name (kill, start)."""

    def __init__(self, trainer, server, actions):
        self.trainer, self.server, self.actions = trainer, server, actions

    def on_step_begin(self, args, state, control, **kwargs):
        script(self.trainer)

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step in self.actions:
            getattr(self.server, self.actions[state.global_step])()


def _per_step(trainer, key):
    return [e[key] for e in trainer.state.log_history if key in e]


def _messages(caplog, text):
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and text in r.getMessage()]


def test_a_killed_store_server_costs_only_the_outages_retrievals(server, tmp_path, tiny_model_dir, caplog, monkeypatch):
    monkeypatch.setattr("rapo_trl.store.retry.time.sleep", lambda s: None)  # the backoff waits, not slept
    store = _store(server)
    trainer = rapo_trainer(tiny_model_dir, tmp_path / "run", store, max_steps=4, retrieve_prob=1.0,
                           store_growth_min_reward=0.0)
    trainer.add_callback(Chaos(trainer, server, {1: "kill", 3: "start"}))
    with caplog.at_level(logging.INFO, logger="rapo_trl"):
        trainer.train()
    assert trainer.state.global_step == 4  # no step failed, no restart of training
    # Rows 0-1 of the group are hybrid and each makes one tool call: 2 retrievals a step.
    assert _per_step(trainer, "rapo/retrieval_rate") == [1.0, 0.0, 0.0, 1.0]  # back by itself at step 4
    assert _per_step(trainer, "rapo/store_errors") == [0.0, 2.0, 4.0, 4.0]  # per row given up, cumulative
    # steps 1 and 4 retrieved stored steps, not the fallback text; steps 2-3, on-policy, retrieved nothing to log
    assert _per_step(trainer, "rapo/fallback_rate") == [0.0, 0.0]
    assert len(_messages(caplog, "is unreachable")) == 1  # one warning for the outage, not one per row
    at_logs = _messages(caplog, "has been unreachable for")
    assert [m.split(" the trace store")[0] for m in at_logs] == ["RAPO: at step 2", "RAPO: at step 3"]
    assert "goes on as GRPO" in at_logs[0]
    assert any("answers again" in r.getMessage() for r in caplog.records)
    assert not trainer.rollout_engine.store_outage.down
    # Growth (one group's best a step) lost the outage's two steps, wrote before and after, and nothing twice.
    assert trainer.rollout_engine.store_outage.growth_lost == 2
    sources = [m["source"] for page in store.iter_batches() for m in page["metadatas"]]
    assert sources.count("policy") >= 2 and len(store) == len({i for p in store.iter_batches(()) for i in p["ids"]})


def test_a_store_that_stays_down_stops_the_run_with_a_whole_checkpoint(server, tmp_path, tiny_model_dir,
                                                                       monkeypatch):
    monkeypatch.setattr("rapo_trl.store.retry.time.sleep", lambda s: None)
    trainer = rapo_trainer(tiny_model_dir, tmp_path / "run", _store(server), max_steps=6, retrieve_prob=1.0,
                           store_outage_max_steps=2)
    trainer.add_callback(Chaos(trainer, server, {1: "kill"}))
    with pytest.raises(StoreUnavailableError, match="stopped at step 3.*checkpoint-3 is whole.*resume_from_checkpoint"):
        trainer.train()
    checkpoint = tmp_path / "run" / "checkpoint-3"
    assert (checkpoint / "trainer_state.json").is_file() and (checkpoint / "rapo_state_0.json").is_file()
