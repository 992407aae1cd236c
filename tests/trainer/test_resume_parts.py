"""The parts that make a resumed run the run it continues: each epoch's prompt order, the store growth taken back,
and a SIGTERM turned into a stop at the end of the step (the whole runs: tests/chaos/test_kill_resume.py)."""

from __future__ import annotations

import logging
import os
import signal
from types import SimpleNamespace

import pytest
from trl.trainer.utils import RepeatSampler

from rapo_trl.embeddings import HashingEmbedder
from rapo_trl.store import StoreConfig, TraceStore
from rapo_trl.trainer.resilience.checkpoint import runs_to_take_back
from rapo_trl.trainer.resilience.epoch_order import ResumableRepeatSampler, resumable
from rapo_trl.trainer.resilience.growth_rollback import growth_tag, take_back_growth
from rapo_trl.trainer.resilience.sigterm_stop import SigtermStop

TRAJECTORY = "<python>print({0})</python>\n<result>\n{0}\n</result>\n<answer>{0}</answer>"


def epochs(sampler, first, last):
    orders = []
    for epoch in range(first, last):
        sampler.set_epoch(epoch) if hasattr(sampler, "set_epoch") else None
        orders.append(list(sampler))
    return orders


def test_a_sampler_started_in_a_later_epoch_walks_the_uninterrupted_order():
    make = dict(data_source=range(5), mini_repeat_count=2, batch_size=1, seed=0)
    whole = epochs(resumable(RepeatSampler(**make)), 0, 4)
    assert epochs(RepeatSampler(**make), 0, 4) == whole  # the same order as TRL's, uninterrupted
    assert epochs(ResumableRepeatSampler(**make), 2, 4) == whole[2:]  # resumed at epoch 2
    assert epochs(RepeatSampler(**make), 2, 4) == whole[:2] != whole[2:]  # TRL's would start over at epoch 0's
    assert epochs(ResumableRepeatSampler(**make, shuffle=False), 3, 4) == [[i for i in range(5) for _ in "ab"]]


def _store(path):
    return TraceStore(path, collection="steps", embedder=HashingEmbedder(64, name="h64"),
                      config=StoreConfig(show_progress=False))


def test_a_resume_deletes_only_its_runs_growth_after_the_checkpoint(tmp_path, caplog):
    with _store(tmp_path / "store") as store:
        store.add_trajectories([TRAJECTORY.format(0)], [1.0], ["q0"], prompts=["Q"])
        for run, step, value in (("a", 1, 1), ("a", 2, 2), ("a", 3, 3), ("b", 3, 4)):  # run b shares the store
            store.add_policy_trajectories(["Q"], [TRAJECTORY.format(value)], [1.0], [f"q{value}"],
                                          metadata=growth_tag(run, step))
        assert len(store) == 10
        with caplog.at_level(logging.INFO, logger="rapo_trl.trainer"):
            assert take_back_growth(store, "a", 1) == 4  # run a's steps 2-3: two records each
        assert "deleted 4 trace-store record(s)" in caplog.text
        left = {(m.get("grown_by"), m.get("grown_at_step")) for p in store.iter_batches() for m in p["metadatas"]}
        assert left == {(None, None), ("a", 1), ("b", 3)}
        assert [r.record_id for r in store.select([f"Q\n{TRAJECTORY.format(2)}"])] != []  # still searchable
    assert take_back_growth(SimpleNamespace(), "a", 1) == 0  # a store of the user's own without the method


def test_a_run_of_two_processes_resumed_on_one_takes_back_both_processes_growth(tmp_path):
    """Each process tags its growth with its own run id: resumed on one process, process 1's records of the steps
    after the checkpoint stayed in the store (the resumed run retrieved them). Process 0 now takes them back too."""
    import json

    checkpoint = tmp_path / "checkpoint-1"
    checkpoint.mkdir()
    for index, run in enumerate("ab"):
        state = {"engine": None, "run": run, "arguments": {"store_growth_min_reward": 0.5}}
        (checkpoint / f"rapo_state_{index}.json").write_text(json.dumps(state))
    assert runs_to_take_back(str(checkpoint), 0, 1, growing=False) == ["a", "b"]  # resumed on one process
    assert runs_to_take_back(str(checkpoint), 0, 2, growing=False) == ["a"]  # on two: each takes its own back
    assert runs_to_take_back(str(checkpoint), 1, 2, growing=False) == ["b"]
    with _store(tmp_path / "store") as store:
        for run, value in (("a", 1), ("b", 2)):
            store.add_policy_trajectories(["Q"], [TRAJECTORY.format(value)], [1.0], [f"q{value}"],
                                          metadata=growth_tag(run, 2))
        for run in runs_to_take_back(str(checkpoint), 0, 1, growing=False):
            take_back_growth(store, run, 1)
        assert len(store) == 0


def test_a_store_that_cannot_delete_is_said_and_the_resume_goes_on(caplog):
    def refuse(where):
        raise ConnectionError("server down")

    with caplog.at_level(logging.WARNING, logger="rapo_trl.trainer"):
        assert take_back_growth(SimpleNamespace(delete=refuse), "a", 2) == 0
    assert "could not delete the trace-store records this run grew after step 2 (ConnectionError" in caplog.text


def test_the_first_sigterm_asks_for_a_stop_and_the_second_goes_to_the_previous_handler(caplog):
    seen = []
    previous = signal.signal(signal.SIGTERM, lambda *args: seen.append("previous"))
    try:
        stop = SigtermStop(SimpleNamespace(num_processes=1))
        stop.install()
        with caplog.at_level(logging.WARNING, logger="rapo_trl.trainer"):
            os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested and seen == [] and "SIGTERM received: finishing this step" in caplog.text
        control = SimpleNamespace(should_save=False, should_training_stop=False)
        stop.on_step_end(None, SimpleNamespace(global_step=3), control)
        assert control.should_save and control.should_training_stop
        os.kill(os.getpid(), signal.SIGTERM)
        assert seen == ["previous"]
        stop.uninstall()
        with pytest.raises(RuntimeError, match="after step 3. The checkpoint out/checkpoint-3 is whole"):
            stop.check_stop("out")
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_sigterm_during_a_save_stops_after_that_save():
    stop = SigtermStop(SimpleNamespace(num_processes=1))
    control = SimpleNamespace(should_save=False, should_training_stop=False)
    stop.on_step_end(None, SimpleNamespace(global_step=4), control)
    assert not control.should_training_stop  # no signal yet
    stop.requested = True  # it came while checkpoint-4 was written
    stop.on_save(None, SimpleNamespace(global_step=4), control)
    assert control.should_training_stop and stop.stopped_at == 4
