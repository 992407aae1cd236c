"""A run stopped mid-step, then resumed with ``resume_from_checkpoint``, trains exactly as the uninterrupted run from
that checkpoint (same seeds): the same questions, per-row rewards, retrieved records and loss at every step. The
tiny model with real sandboxed tool calls, a real Chroma store grown by the run (``store_growth_min_reward``) and retrieval drawn
at p = 0.5 (tests/helpers/resume_run.py).

Here: SIGKILL in the loss of step 3, in a process of its own (after step 3 grew the store; checkpoint-2 is the
last), and SIGTERM in step 3's generation, in this process (the run finishes step 3, saves checkpoint-3 and stops).
``benchmarks/bench_chaos.py resume`` kills and terms at every point (generation, loss, checkpoint save) in
processes of their own."""

from __future__ import annotations

import logging
import shutil
import sys
from contextlib import contextmanager

import pytest
import torch

from rapo_trl.trainer.resilience.sigterm_stop import TrainingStoppedError
from tests.helpers.kill_run import stop_run
from tests.helpers.resume_run import STEPS, build_store, make_trainer, per_step, store_records

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sandbox layers are Linux-only")


@contextmanager
def one_thread():
    """In this process as in the killed one (OMP_NUM_THREADS=1): one thread sums a matmul in one order."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def train(work, name, resume=False, **options):
    with one_thread():
        trainer = make_trainer(work["model"], work["runs"] / name, work["runs"] / f"{name}-store", **options)
        try:
            trainer.train(resume_from_checkpoint=True if resume else None)
        finally:
            trainer.trace_store.close()
    return trainer


@pytest.fixture(scope="module")
def work(tmp_path_factory, tiny_model_dir):
    """The store every run starts from, and the uninterrupted run's journal."""
    root = tmp_path_factory.mktemp("resume")
    build_store(root / "store")
    work = {"model": tiny_model_dir, "store": root / "store", "runs": root / "runs"}
    fresh(work, "whole")
    train(work, "whole")
    return work


def fresh(work, name):
    """A copy of the starting store for run ``name``."""
    return shutil.copytree(work["store"], work["runs"] / f"{name}-store")


def steps_of(work, name):
    return per_step(work["runs"] / name)


def test_sigkill_in_the_loss_then_resume_equals_the_uninterrupted_run(work, caplog):
    stopped = stop_run(work["model"], work["runs"] / "killed", fresh(work, "killed"), "loss", 3, "kill")
    assert stopped.returncode == -9 and not stopped.left, stopped.stderr[-2000:]
    run = work["runs"] / "killed"
    assert sorted(p.name for p in run.glob("checkpoint-*")) == ["checkpoint-2"]
    whole = steps_of(work, "whole")
    assert sorted(steps_of(work, "killed")) == [1, 2]  # step 3 never ended
    _, metadata = store_records(work["runs"] / "killed-store")
    assert any(m.get("grown_at_step") == 3 for m in metadata)  # but it had grown the store before its loss

    with caplog.at_level(logging.WARNING, logger="rapo_trl"):
        train(work, "killed", resume=True)
    # the growth past the checkpoint was taken back: the store is the one the checkpoint's run retrieved from
    assert "another trace store" not in caplog.text
    resumed = steps_of(work, "killed")
    assert sorted(resumed) == list(range(1, STEPS + 1))
    for step in range(3, STEPS + 1):
        assert resumed[step] == whole[step], (step, resumed[step], whole[step])
    assert any(retrieved for step in (3, 4) for retrieved in whole[step][2])  # retrieval drawn and compared
    # The same records as the uninterrupted run's store, none twice, each with all its fields.
    ids, metadata = store_records(work["runs"] / "killed-store")
    whole_ids, whole_metadata = store_records(work["runs"] / "whole-store")
    assert sorted(ids) == sorted(whole_ids) and len(ids) == len(set(ids))
    assert sorted(map(sorted, metadata)) == sorted(map(sorted, whole_metadata))


def test_sigterm_finishes_the_step_saves_it_and_resumes_exactly(work):
    fresh(work, "termed")
    with pytest.raises(TrainingStoppedError, match="stopped on SIGTERM after step 3.*checkpoint-3 is whole"):
        train(work, "termed", stop="generate:3:self")
    run = work["runs"] / "termed"
    assert sorted(p.name for p in run.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-3"]
    assert (run / "checkpoint-3" / "trainer_state.json").is_file() and (run / "checkpoint-3" / "rapo_state_0.json").is_file()
    whole = steps_of(work, "whole")
    assert steps_of(work, "termed")[3] == whole[3]  # the step the signal came in was finished as it would have been

    train(work, "termed", resume=True)
    assert steps_of(work, "termed")[STEPS] == whole[STEPS]


def test_saving_checkpoints_changes_no_number_of_the_run(work):
    """A run that saves no checkpoint trains as the one that saves every other step: saving only reads the run's
    state, so a benchmark may save every step to resume a killed run and still compare with runs that saved none."""
    fresh(work, "unsaved")
    train(work, "unsaved", save_steps=STEPS + 1)
    # Trainer saves the last step whatever save_steps says: none of the steps compared follows a save
    assert [p.name for p in (work["runs"] / "unsaved").glob("checkpoint-*")] == [f"checkpoint-{STEPS}"]
    assert steps_of(work, "unsaved") == steps_of(work, "whole")
