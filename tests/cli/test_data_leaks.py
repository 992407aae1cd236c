"""Your own data: no held-out question reaches what training reads (the store), whatever settings each command
ran with, and no training row is dropped or merged by a question id that names two questions."""

from __future__ import annotations

import json

import pytest
from datasets import Dataset

from rapo_trl.cli import parse_recipe, train
from rapo_trl.cli.common import UsageError, open_store, training_rows
from rapo_trl.embeddings import HashingEmbedder


@pytest.fixture(autouse=True)
def hashing_embedder(monkeypatch):
    """Model-free embeddings: these tests are about which questions go where, not about similarity."""
    monkeypatch.setattr("rapo_trl.embeddings.default_embedder", lambda: HashingEmbedder())


def _jsonl(path, n=40):
    path.write_text("".join(json.dumps({"question": f"What is {i} * 3?", "answer": str(3 * i)}) + "\n"
                            for i in range(n)))
    return str(path)


def _recipe(tmp_path, command, *flags):
    return parse_recipe(command, ["--task", "dataset", "--dataset_path", _jsonl(tmp_path / "qa.jsonl"),
                                  "--store_path", str(tmp_path / "store"), "--output_dir", str(tmp_path / "model"),
                                  "--model_name_or_path", "tiny", "--use_cpu", "true", "--bf16", "false", "--max_steps", "1",
                                  "--num_generations", "2", "--per_device_train_batch_size", "2",
                                  "--max_completion_length", "16", "--max_turn_tokens", "8", "--save_strategy", "no",
                                  "--report_to", "none", *flags])


def _store_as_build_store_fills_it(script):
    """What `rapo build-store` stores: a trajectory of each question of the recipe's store split, by its id."""
    rows = training_rows(script, "store", tools=[])
    trajectories = Dataset.from_dict({
        "trajectory": [f"<think>multiply</think>\n<answer>\\boxed{{{answer}}}</answer>" for answer in rows["answer"]],
        "reward": [1.0] * len(rows), "question_id": rows["question_id"], "question": rows["question"]})
    with open_store(script, must_exist=False) as store:
        store.add_from_dataset(trajectories, source="agent:test", tool_tags=["python"])


def test_train_refuses_a_store_built_with_another_eval_fraction(tmp_path):
    """build-store with eval_fraction 0.1 stores 36 of 40 questions; train with 0.3 holds out 12, 8 of them stored."""
    _store_as_build_store_fills_it(_recipe(tmp_path, "build-store", "--eval_fraction", "0.1")[0])
    with pytest.raises(UsageError, match="holds trajectories of 8 questions of the eval set 'eval'"):
        train.run(*_recipe(tmp_path, "train", "--eval_fraction", "0.3"))


def test_train_on_an_environment_refuses_a_store_built_with_another_eval_fraction(tmp_path):
    """An environment's store is keyed by the same question ids (`rapo build-store` fills it from the same rows)."""
    environment = ["--environment_factory", "tests.helpers.environments.Counter"]
    _store_as_build_store_fills_it(_recipe(tmp_path, "build-store", "--eval_fraction", "0.1", *environment)[0])
    with pytest.raises(UsageError, match="holds trajectories of 8 questions of the eval set 'eval'"):
        train.run(*_recipe(tmp_path, "train", "--eval_fraction", "0.3", *environment))


def test_train_refuses_a_store_built_with_another_task_seed(tmp_path):
    _store_as_build_store_fills_it(_recipe(tmp_path, "build-store", "--task_seed", "0")[0])
    with pytest.raises(UsageError, match="rapo build-store ran with other data settings"):
        train.run(*_recipe(tmp_path, "train", "--task_seed", "1"))


@pytest.mark.parametrize("variant", ["What is {i} * 3? ", "what is {i}  *  3?\n"], ids=["trailing-space", "case"])
def test_train_refuses_a_store_of_eval_questions_spaced_or_cased_otherwise(tmp_path, variant):
    """A store built before the eval file was given holds every question of the training file; an eval file that
    asks four of them again, spaced or cased otherwise (exported again), leaves them out of training but gives them
    other ids, and retrieval would show their stored solutions."""
    other = tmp_path / "other_eval.jsonl"
    other.write_text(json.dumps({"question": "What is 1000 * 3?", "answer": "3000"}) + "\n")
    _store_as_build_store_fills_it(_recipe(tmp_path, "build-store", "--eval_dataset_path", str(other))[0])
    held = tmp_path / "eval.jsonl"
    held.write_text("".join(json.dumps({"question": variant.format(i=i), "answer": str(3 * i)}) + "\n"
                            for i in range(8, 12)))
    with pytest.raises(UsageError, match="holds trajectories of 4 questions of the eval set 'eval'"):
        train.run(*_recipe(tmp_path, "train", "--eval_dataset_path", str(held)))


def test_a_store_built_with_the_same_settings_passes(tmp_path):
    script = _recipe(tmp_path, "build-store", "--eval_fraction", "0.3", "--eval_size", "2")[0]
    _store_as_build_store_fills_it(script)
    with open_store(script, must_exist=True) as store:
        train.check_store_holds_no_eval_question(script, {"traces": store})


def _with_ids(questions, ids):
    return Dataset.from_dict({"question_id": ids, "question": questions, "answer": [str(len(q)) for q in questions]})


@pytest.mark.parametrize("test_ids", [[0, 1, 2, 3], None], ids=["ids-counted-per-split", "one-split-repeats-an-id"])
def test_a_question_id_that_names_two_questions_is_refused(tmp_path, test_ids):
    """Ids counted from 0 in each split dropped 4 of 10 training rows silently (the test split's ids 0-3 matched
    them); one id on two questions gives the store's trajectories of one to the other."""
    from datasets import DatasetDict

    from rapo_trl.cli.arguments import RAPOScriptArguments
    from rapo_trl.cli.common import load_questions

    train_ids = list(range(10)) if test_ids else [0, 1, 2, 3, 4, 5, 6, 7, 8, 8]
    splits = {"train": _with_ids([f"What is {i} - 1?" for i in range(10)], train_ids)}
    if test_ids:
        splits["test"] = _with_ids([f"What is {i} - 1?" for i in range(100, 104)], test_ids)
    DatasetDict(splits).save_to_disk(tmp_path / "saved")
    script = RAPOScriptArguments(task="dataset", dataset_name=str(tmp_path / "saved"))
    with pytest.raises(UsageError, match="question_id .* names two questions"):
        load_questions(script, "train")


def test_ids_that_name_one_question_each_keep_every_training_row(tmp_path):
    from datasets import DatasetDict

    from rapo_trl.cli.arguments import RAPOScriptArguments
    from rapo_trl.cli.common import load_questions

    DatasetDict({"train": _with_ids([f"What is {i} - 1?" for i in range(10)], list(range(10))),
                 "test": _with_ids([f"What is {i} - 1?" for i in range(100, 104)], list(range(10, 14)))}
                ).save_to_disk(tmp_path / "saved")
    script = RAPOScriptArguments(task="dataset", dataset_name=str(tmp_path / "saved"))
    assert len(load_questions(script, "train")) == 10 and len(load_questions(script, "eval")) == 4


def test_an_eval_file_that_is_the_training_file_is_refused_not_trained_on_nothing(tmp_path):
    """eval_dataset_path = dataset_path left 0 training questions, and the commands went on."""
    from rapo_trl.cli.arguments import RAPOScriptArguments
    from rapo_trl.cli.common import load_questions

    path = _jsonl(tmp_path / "qa.jsonl", n=10)
    script = RAPOScriptArguments(task="dataset", dataset_path=path, eval_dataset_path=path)
    with pytest.raises(UsageError, match="all 10 training questions .* are eval questions too"):
        load_questions(script, "train")


@pytest.mark.parametrize("variant", ["What is {i} * 3? ", "what is {i}  *  3?\n"], ids=["trailing-space", "case"])
def test_an_eval_question_spaced_or_cased_otherwise_leaves_training(tmp_path, variant):
    """An eval file whose questions differ from the training file's only in spacing or case (exported again) kept
    them in training: 2 of its 4 eval questions were trained on, and nothing said so."""
    from rapo_trl.cli.arguments import RAPOScriptArguments
    from rapo_trl.cli.common import load_questions

    held = tmp_path / "eval.jsonl"
    held.write_text("".join(json.dumps({"question": variant.format(i=i), "answer": str(3 * i)}) + "\n"
                            for i in range(8, 12)))
    script = RAPOScriptArguments(task="dataset", dataset_path=_jsonl(tmp_path / "qa.jsonl", n=10),
                                 eval_dataset_path=str(held))
    assert load_questions(script, "train")["question"] == [f"What is {i} * 3?" for i in range(8)]


def test_a_store_holding_a_shipped_tasks_eval_question_is_refused(tmp_path):
    """A shipped task files trajectories under its own ids (``word_problems-...``), not a hash of the text."""
    from rapo_trl.cli.common import load_questions

    script = parse_recipe("train", ["--task", "word_problems", "--store_path", str(tmp_path / "store"),
                                    "--model_name_or_path", "tiny", "--eval_splits", "reward_only_fresh"])[0]
    asked = load_questions(script, "reward_only_fresh")[0]
    leaked = Dataset.from_dict({"trajectory": [f"<think>add</think>\n<answer>\\boxed{{{asked['answer']}}}</answer>"],
                                "reward": [1.0], "question_id": [asked["question_id"]]})
    with open_store(script, must_exist=False) as store:
        store.add_from_dataset(leaked, source="agent:test", tool_tags=["python"])
        with pytest.raises(UsageError, match="holds trajectories of 1 questions of the eval set 'reward_only_fresh'"):
            train.check_store_holds_no_eval_question(script, {"traces": store})


class _TrainingStopped(Exception):
    pass


def _train_until_the_record_is_written(monkeypatch, script, rapo_args, model_args):
    """`rapo train` up to its run record, which it writes before training: the model and trainer are stubs."""
    from types import SimpleNamespace

    class Trainer:
        tool_protocol = "tags"

        def is_world_process_zero(self):
            return True

        def train(self, resume_from_checkpoint=None):
            raise _TrainingStopped

    source = SimpleNamespace(path="tiny", peft_config=None, tokenizer=None, init_kwargs={})
    monkeypatch.setattr(train, "load_policy_source", lambda *args: source)
    monkeypatch.setattr(train, "build_trainer", lambda *args: Trainer())
    with pytest.raises(_TrainingStopped):
        train.run(script, rapo_args, model_args)


def test_eval_refuses_questions_whose_stored_solutions_training_retrieved(tmp_path, tiny_model_dir, monkeypatch):
    """build-store with a larger train_size than `rapo train` stores solutions of questions RL never asked, which
    retrieval still showed the policy: an eval set of them is not held out either."""
    import shutil

    from rapo_trl.cli import evaluate, model_scoring
    from rapo_trl.cli.common import load_questions
    from rapo_trl.cli.run_record import record_run_finished

    builder = _recipe(tmp_path, "build-store", "--train_size", "20")[0]
    _store_as_build_store_fills_it(builder)
    script, rapo_args, model_args = _recipe(tmp_path, "train", "--train_size", "4", "--retrieve_prob", "1.0")
    _train_until_the_record_is_written(monkeypatch, script, rapo_args, model_args)
    trained = set(load_questions(script, "train")["question"])
    stored = training_rows(builder, "store", tools=[])
    only_stored = [(q, a) for q, a in zip(stored["question"], stored["answer"]) if q not in trained]
    held = tmp_path / "eval.jsonl"
    held.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in only_stored[:3]))
    shutil.copytree(tiny_model_dir, tmp_path / "model", dirs_exist_ok=True)
    record_run_finished(str(tmp_path / "model"))  # as the run does once it has saved its model
    monkeypatch.setattr(model_scoring, "load_policy", lambda *a, **k: pytest.fail("a model loaded"))
    with pytest.raises(UsageError, match=r"eval set 'eval' holds 3 of its 3 questions whose solutions the store "
                                         r"collection\(s\) 'traces' .* held"):
        evaluate.run(*_recipe(tmp_path, "eval", "--eval_dataset_path", str(held), "--eval_model",
                              str(tmp_path / "model"), "--eval_base", "false"))


def test_train_reads_a_collections_questions_once(tmp_path, monkeypatch):
    """The check that the store holds no eval question and the run record's list of the store's questions use the
    same keys of its first steps: one pass through the collection gives both."""
    from rapo_trl.cli.run_record import question_hashes, read_run_record
    from rapo_trl.store import agent

    _store_as_build_store_fills_it(_recipe(tmp_path, "build-store")[0])
    script, rapo_args, model_args = _recipe(tmp_path, "train", "--retrieve_prob", "1.0")
    read = []
    stored_first_keys = agent.stored_first_keys
    monkeypatch.setattr(agent, "stored_first_keys",
                        lambda store: read.append(store.collection_name) or stored_first_keys(store))
    _train_until_the_record_is_written(monkeypatch, script, rapo_args, model_args)
    assert read == ["traces"]
    with open_store(script, must_exist=True) as store:
        every_question = sorted(question_hashes(stored_first_keys(store)))
    assert read_run_record(str(tmp_path / "model"))["store_question_hashes"] == every_question
