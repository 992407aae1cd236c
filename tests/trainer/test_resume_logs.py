"""What a resumed or multi-step-logged run writes to its log: counts over the run go on from the checkpoint and are
logged at their latest value (docs/metrics.md)."""

from __future__ import annotations

from transformers import TrainerCallback

from rapo_trl.config import RAPOConfig
from rapo_trl.trainer import RAPOTrainer
from tests.helpers.fakes import EchoTool, FixedStore
from tests.helpers.scripted import Turn
from tests.helpers.trainers import common_args, dataset, script, sevens

TOOL_STEP = [Turn("<python>1</python>"), Turn("<answer>7</answer>"), Turn("<|im_end|>")]


class DownAt(FixedStore):
    """A store whose server is down during the listed (1-based) training steps."""

    def __init__(self, steps):
        super().__init__()
        self.steps, self.trainer = set(steps), None

    def select(self, contexts):
        if self.trainer.state.global_step + 1 in self.steps:
            raise ConnectionError("store down")
        return super().select(contexts)


class Scripted(TrainerCallback):
    def __init__(self, trainer):
        self.trainer = trainer

    def on_step_begin(self, args, state, control, **kwargs):
        script(self.trainer, [TOOL_STEP] * 4)


class StopAfter(TrainerCallback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        control.should_training_stop = state.global_step >= self.step


def store_error_run(tiny_model_dir, output_dir, down, resume=None, stop=None, **settings):
    store = DownAt(down)
    args = RAPOConfig(**common_args(output_dir, **{"max_steps": 4, "save_strategy": "steps", "save_steps": 2,
                                                   "max_completion_length": 64, **settings}),
                      max_turn_tokens=16, retrieve_prob=1.0)
    trainer = RAPOTrainer(str(tiny_model_dir), sevens, args=args, train_dataset=dataset(), trace_store=store,
                          tools=[EchoTool()], callbacks=[StopAfter(stop)] if stop else None)
    store.trainer = trainer
    trainer.rollout_engine.store_outage.backoff_s = 0.0
    trainer.add_callback(Scripted(trainer))
    trainer.train(resume_from_checkpoint=resume)
    return {e["step"]: e["rapo/store_errors"] for e in trainer.state.log_history if "rapo/store_errors" in e}


def test_store_errors_go_on_counting_after_a_resume(tiny_model_dir, tmp_path):
    # Two hybrid rows give up their retrieval at step 2; the count is the run's, so it stays 2 after the checkpoint.
    assert store_error_run(tiny_model_dir, tmp_path / "full", down=[2]) == {1: 0.0, 2: 2.0, 3: 2.0, 4: 2.0}
    store_error_run(tiny_model_dir, tmp_path / "killed", down=[2], stop=2)
    resumed = store_error_run(tiny_model_dir, tmp_path / "killed", down=[2], resume=True)
    assert resumed == {1: 0.0, 2: 2.0, 3: 2.0, 4: 2.0}  # was 0.0 at steps 3-4: the count started over


def test_store_errors_logged_every_other_step_are_the_count_not_a_mean_of_counts(tiny_model_dir, tmp_path):
    logged = store_error_run(tiny_model_dir, tmp_path, down=[2], logging_steps=2, save_strategy="no")
    assert logged == {2: 2.0, 4: 2.0}  # was 1.0 at step 2: the mean of the counts after steps 1 (0) and 2 (2)


def test_a_resume_on_another_store_says_so_and_one_on_the_same_store_does_not(tiny_model_dir, tmp_path, caplog):
    """A checkpoint records the store its run retrieved from; resuming against another one (another folder, record
    count, collection or embedder) warns that the run is not the interrupted one continued."""
    import logging

    from rapo_trl.embeddings import HashingEmbedder
    from rapo_trl.store import TraceStore

    trajectory = "<think>t</think>\n<python>1</python>\n<result>\n1\n</result>\n<answer>7</answer>"
    stores = {}
    for name, count in (("same", 1), ("other", 2)):
        stores[name] = TraceStore(tmp_path / name, embedder=HashingEmbedder(32))
        stores[name].add_trajectories([trajectory] * count, [1.0] * count, [f"q{i}" for i in range(count)],
                                      prompts=["Q"] * count)

    def run(store, resume=None, stop=None):
        args = RAPOConfig(**common_args(tmp_path / "run", max_steps=2, save_strategy="steps", save_steps=1,
                                        max_completion_length=64), max_turn_tokens=16, retrieve_prob=1.0)
        trainer = RAPOTrainer(str(tiny_model_dir), sevens, args=args, train_dataset=dataset(), trace_store=store,
                              tools=[EchoTool()], callbacks=[StopAfter(stop)] if stop else None)
        trainer.add_callback(Scripted(trainer))
        with caplog.at_level(logging.WARNING, logger="rapo_trl"):
            trainer.train(resume_from_checkpoint=resume)

    run(stores["same"], stop=1)
    checkpoint = str(tmp_path / "run" / "checkpoint-1")
    caplog.clear()
    run(stores["same"], resume=checkpoint)
    assert "another trace store" not in caplog.text
    caplog.clear()
    run(stores["other"], resume=checkpoint)
    warning = next(r.getMessage() for r in caplog.records if "another trace store" in r.getMessage())
    assert "location" in warning and "records 2 -> 4" in warning  # two step records a trajectory
    for store in stores.values():
        store.close()


def test_a_resume_with_other_arguments_names_what_they_do_and_an_unchanged_one_says_nothing(tiny_model_dir, tmp_path,
                                                                                             caplog):
    """Trainer keeps the checkpoint's learning rate and RNGs, stretches the schedules over a new max_steps and skips
    the trained batches counted in the new sizes over the new dataset, all without a word (but for the batch size):
    the checkpoint records the run's arguments and a resume names those that differ."""
    import logging

    def run(resume=None, stop=None, rows=1, **settings):
        args = RAPOConfig(**common_args(tmp_path / "run", **{"max_steps": 2, "save_strategy": "steps", "save_steps": 1,
                                                             "max_completion_length": 64, **settings}),
                          max_turn_tokens=16, retrieve_prob=1.0, retrieve_prob_final=0.0)
        trainer = RAPOTrainer(str(tiny_model_dir), sevens, args=args, train_dataset=dataset(rows),
                              trace_store=FixedStore(), tools=[EchoTool()],
                              callbacks=[StopAfter(stop)] if stop else None)
        trainer.add_callback(Scripted(trainer))
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="rapo_trl"):
            trainer.train(resume_from_checkpoint=resume)
        return [r.getMessage() for r in caplog.records if "other arguments" in r.getMessage()]

    run(stop=1)
    checkpoint = str(tmp_path / "run" / "checkpoint-1")
    assert run(resume=checkpoint) == []
    (warning,) = run(resume=checkpoint, learning_rate=0.01, seed=3, max_steps=4, rows=2, num_generations=2)
    assert "learning_rate 0.1 -> 0.01: not applied" in warning
    assert "max_steps 2 -> 4" in warning and "(p 0.5 -> 0.75 at step 1)" in warning
    assert "seed 0 -> 3" in warning and "num_generations 4 -> 2" in warning and "dataset_rows 1 -> 2" in warning
    assert "the dataset's rows" not in warning  # its size said it


def test_the_dataset_digest_sees_another_order_or_other_rows_and_not_a_copy():
    from rapo_trl.trainer.resilience.changed_arguments import dataset_digest

    rows = [{"prompt": f"Q{i}"} for i in range(200)]
    assert dataset_digest(rows) == dataset_digest([dict(row) for row in rows])
    assert dataset_digest(rows) != dataset_digest(rows[::-1])
    assert dataset_digest(rows) != dataset_digest(rows[:100] + [{"prompt": "other"}] + rows[101:])
    assert dataset_digest(iter(rows)) is None  # no length: not compared


def test_a_resume_with_store_growth_off_still_takes_back_what_its_run_grew_after_the_checkpoint(tiny_model_dir,
                                                                                                tmp_path):
    """Resumed with store_growth_min_reward=None, the run grows nothing, but the interrupted run's records of the steps
    after the checkpoint were left in the store for the resumed steps to retrieve."""
    from rapo_trl.embeddings import HashingEmbedder
    from rapo_trl.store import TraceStore

    def grown(store):
        return sorted(m["grown_at_step"] for page in store.iter_batches() for m in page["metadatas"]
                      if "grown_at_step" in m)

    store = TraceStore(tmp_path / "store", embedder=HashingEmbedder(32))
    store.add_trajectories(["<think>t</think>\n<python>1</python>\n<result>\n1\n</result>\n<answer>7</answer>"], [1.0],
                           ["q0"], prompts=["Q"])

    def run(resume=None, **settings):
        args = RAPOConfig(**common_args(tmp_path / "run", max_steps=2, save_strategy="steps", save_steps=1,
                                        max_completion_length=64), max_turn_tokens=16, retrieve_prob=1.0, **settings)
        trainer = RAPOTrainer(str(tiny_model_dir), sevens, args=args, train_dataset=dataset(), trace_store=store,
                              tools=[EchoTool()])
        trainer.add_callback(Scripted(trainer))
        trainer.train(resume_from_checkpoint=resume)

    run(store_growth_min_reward=0.0)
    assert 1 in grown(store) and 2 in grown(store)
    run(resume=str(tmp_path / "run" / "checkpoint-1"), store_growth_min_reward=None)
    assert 2 not in grown(store) and 1 in grown(store)  # step 2 was taken again, growing nothing
    store.close()


def test_a_resume_with_shuffling_turned_on_or_off_says_what_it_does_to_the_order(caplog):
    """TRL's sampler shuffles by shuffle_dataset: a resume that turns it on or off walks another order while the
    trained batches are skipped by position, as another seed does."""
    import logging
    from types import SimpleNamespace

    from rapo_trl.trainer.resilience.changed_arguments import (
        run_arguments,
        warn_if_resumed_with_other_arguments,
    )

    def arguments(shuffle):
        args = SimpleNamespace(learning_rate=0.1, seed=0, per_device_train_batch_size=4, gradient_accumulation_steps=1,
                               steps_per_generation=1, retrieve_prob=1.0, retrieve_prob_final=None,
                               store_growth_min_reward=None, shuffle_dataset=shuffle)
        trainer = SimpleNamespace(args=args, shuffle_dataset=shuffle, state=SimpleNamespace(max_steps=4),
                                  num_generations=4, num_iterations=1, train_dataset=[{"prompt": "Q0"}, {"prompt": "Q1"}],
                                  accelerator=SimpleNamespace(num_processes=1))
        return run_arguments(trainer)

    with caplog.at_level(logging.WARNING, logger="rapo_trl"):
        assert warn_if_resumed_with_other_arguments("checkpoint-1", arguments(True), arguments(True), 1) == []
        assert warn_if_resumed_with_other_arguments("checkpoint-1", arguments(True), arguments(False), 1) == [
            "shuffle_dataset"]
    assert "shuffle_dataset True -> False" in caplog.text
