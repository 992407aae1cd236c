"""A run stopped mid-step, then resumed with ``resume_from_checkpoint``, trains exactly as the uninterrupted run from
that checkpoint (same seeds): the same questions, per-row rewards, retrieved records and loss at every step. The
tiny model with real sandboxed tool calls, a real Chroma store grown by the run (``grow_store``) and retrieval drawn
at p = 0.5 (tests/helpers/resume_run.py).

Here: SIGKILL in the loss of step 3, in a process of its own (after step 3 grew the store; checkpoint-2 is the
last), and SIGTERM in step 3's generation, in this process (the run finishes step 3, saves checkpoint-3 and stops).
``benchmarks/bench_chaos.py resume`` kills and terms at every point (generation, loss, checkpoint save) in
processes of their own."""

from __future__ import annotations

import shutil
import sys
from contextlib import contextmanager

import pytest
import torch

from rapo_trl.trainer.sigterm_stop import TrainingStoppedError
from tests.helpers.kill_run import stop_run
from tests.helpers.resume_run import STEPS, build_store, make_trainer, open_store, read_jsonl

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


def train(work, name, resume=False, **stop):
    with one_thread():
        trainer = make_trainer(work["model"], work["runs"] / name, work["runs"] / f"{name}-store", **stop)
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


def per_step(work, name):
    """step -> (questions, per-row rewards, retrieved record ids, loss, mean reward), the last entry of each step."""
    steps = {e["step"]: e for e in read_jsonl(work["runs"] / name / "steps.jsonl")}
    logs = {e["step"]: e for e in read_jsonl(work["runs"] / name / "log.jsonl") if "loss" in e}
    return {step: (e["questions"], e["rewards"], e["retrieved"], logs[step]["loss"], logs[step]["reward"])
            for step, e in steps.items()}


def store_records(path):
    with open_store(path) as store:
        pages = list(store.iter_batches())
    return [i for p in pages for i in p["ids"]], [m for p in pages for m in p["metadatas"]]


def test_sigkill_in_the_loss_then_resume_equals_the_uninterrupted_run(work):
    stopped = stop_run(work["model"], work["runs"] / "killed", fresh(work, "killed"), "loss", 3, "kill")
    assert stopped.returncode == -9 and not stopped.left, stopped.stderr[-2000:]
    run = work["runs"] / "killed"
    assert sorted(p.name for p in run.glob("checkpoint-*")) == ["checkpoint-2"]
    ids, _ = store_records(work["runs"] / "killed-store")
    whole = per_step(work, "whole")
    assert sorted(per_step(work, "killed")) == [1, 2]  # step 3 never ended
    grown_by_step_3 = len(ids) - len(store_records(work["store"])[0]) - 2  # steps 1-2 grew one trajectory each
    assert grown_by_step_3 > 0  # the killed step had grown the store before its loss

    train(work, "killed", resume=True)
    resumed = per_step(work, "killed")
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
    whole = per_step(work, "whole")
    assert per_step(work, "termed")[3] == whole[3]  # the step the signal came in was finished as it would have been

    train(work, "termed", resume=True)
    assert per_step(work, "termed")[STEPS] == whole[STEPS]
