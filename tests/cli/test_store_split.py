"""store_split: the store holds RL's own questions (as the paper builds it), the warm start the demonstrated ones.

The demo recipe's store and warm start are checked by content: every stored question is an RL training question,
every warm-start example a demonstrated one, and no eval question's text reaches either.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rapo_trl.cli import build_store, parse_recipe
from rapo_trl.cli.common import (
    UsageError,
    load_questions,
    open_store,
    task_split,
    training_rows,
    warm_start_collection,
)
from rapo_trl.cli.warm_start import warm_start_examples
from rapo_trl.embeddings import HashingEmbedder

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "configs" / "demo_cpu.yaml"
EVAL_SETS = ("reward_only_fresh", "heldout_stories", "heldout_shapes")
SMALL = 12  # RL and demonstrated questions: the demo's splits, fewer of them (each expert step runs the python tool)


@pytest.fixture(autouse=True)
def hashing_embedder(monkeypatch):
    """Model-free embeddings: these tests are about which questions go where, not about similarity."""
    monkeypatch.setattr("rapo_trl.embeddings.default_embedder", lambda: HashingEmbedder())


def _demo(tmp_path, command="build-store", *overrides, size=SMALL):
    return parse_recipe(command, ["--config", str(DEMO), "--train_size", str(size),
                                  "--store_path", str(tmp_path / "store"), *overrides])


def test_store_split_defaults_to_the_demo_split_so_older_recipes_keep_their_store():
    from rapo_trl.cli.arguments import RAPOScriptArguments

    old = RAPOScriptArguments(task="word_problems", demo_split="demonstrated", train_split="reward_only")
    assert task_split(old, "store") == "demonstrated" and warm_start_collection(old) == "traces"
    assert task_split(RAPOScriptArguments(), "store") == "train"
    new = RAPOScriptArguments(task="word_problems", demo_split="demonstrated", train_split="reward_only",
                              store_split="reward_only", store_collection="mine")
    assert task_split(new, "store") == "reward_only" and warm_start_collection(new) == "mine-warm-start"


def test_an_eval_set_cannot_be_the_store_split():
    from rapo_trl.cli.arguments import RAPOScriptArguments

    script = RAPOScriptArguments(task="word_problems", train_split="reward_only", store_split="reward_only_fresh")
    with pytest.raises(UsageError, match="'reward_only_fresh' cannot be a training split"):
        load_questions(script, "store")


def _texts(records) -> list[str]:
    return [" ".join(str(row[c]) for c in ("key", "value", "prompt") if c in row) for row in records]


def test_demo_store_holds_rl_questions_and_the_warm_start_the_demonstrated_ones_and_no_eval_question(tmp_path):
    script, args, model = _demo(tmp_path)
    assert task_split(script, "store") == task_split(script, "train") == "reward_only"
    result = build_store.run(script, args, model)
    rl, demo = load_questions(script, "train"), load_questions(script, "demo")
    evals = {name: load_questions(script, name) for name in EVAL_SETS}  # as many as the demo asks (eval_size)

    store = open_store(script, must_exist=True)
    records = store.to_dataset(include_embeddings=False)
    warm = open_store(script, must_exist=True, collection=warm_start_collection(script))
    examples = warm_start_examples(training_rows(script, "demo"), warm, min_reward=1.0)
    assert result["questions"] == len(rl) and result["warm_start"]["questions"] == len(demo)
    # by id: the store is RL's questions, every one of them; the warm start's collection the demonstrated ones
    assert set(records["question_id"]) == set(rl["question_id"])
    assert set(warm.to_dataset(include_embeddings=False)["question_id"]) == set(demo["question_id"])
    assert not set(rl["question_id"]) & set(demo["question_id"])
    # by content: each stored question's text is in the store (so the check below can see text), no eval one is
    stored, taught = " ".join(_texts(records)), " ".join(str(e) for e in examples)
    assert all(question in stored for question in rl["question"])
    # (a demonstrated question whose sampled trajectories all failed has no example: min_reward=1)
    assert len(examples) > len(demo) // 2
    assert all(any(question in str(example["prompt"]) for question in demo["question"]) for example in examples)
    assert not any(question in taught for question in rl["question"])  # the warm start never shows RL's questions
    for name, rows in evals.items():
        assert len(rows) == script.eval_size >= 64, name
        leaked = [q for q in rows["question"] if q in stored or q in taught]
        assert leaked == [], f"{name} questions in the store or the warm start: {leaked[:2]}"


def test_the_two_collections_filled_at_once_hold_what_one_after_the_other_gives(tmp_path, monkeypatch):
    """The scripted expert fills the store and the warm start's collection in two threads; their records (ids,
    keys, values, rewards) are those of a build that fills them one after the other."""

    class OneAfterTheOther:
        def __init__(self, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def map(self, fn, items):
            return [fn(item) for item in items]

    def records(folder):
        script = _demo(folder, size=3)[0]
        found = {}
        for collection in (script.store_collection, warm_start_collection(script)):
            rows = open_store(script, must_exist=True, collection=collection).to_dataset(include_embeddings=False)
            found[collection] = sorted(zip(rows["id"], rows["key"], rows["value"], rows["reward"]))
        return found

    threads = []
    real = build_store.ThreadPoolExecutor
    monkeypatch.setattr(build_store, "ThreadPoolExecutor", lambda **kw: threads.append(kw) or real(**kw))
    build_store.run(*_demo(tmp_path / "at-once", size=3))
    assert threads and threads[0]["max_workers"] == 2
    monkeypatch.setattr(build_store, "ThreadPoolExecutor", OneAfterTheOther)
    build_store.run(*_demo(tmp_path / "in-turn", size=3))
    at_once, in_turn = records(tmp_path / "at-once"), records(tmp_path / "in-turn")
    assert all(at_once.values()) and at_once == in_turn


def test_a_store_of_other_questions_is_refused_not_mixed_into(tmp_path):
    """A store built before store_split (the demonstrated stories) would keep them beside RL's questions on resume."""
    build_store.run(*_demo(tmp_path, "build-store", "--store_split", "demonstrated", "--sft_warmup_steps", "0", size=4))
    with pytest.raises(UsageError, match="questions that are not of split 'reward_only'"):
        build_store.run(*_demo(tmp_path, size=4))


def test_without_a_warm_start_only_rl_questions_are_built(tmp_path):
    """No agent time on the demonstrated stories when nothing imitates them; the store is still RL's questions."""
    script, args, model = _demo(tmp_path, "build-store", "--sft_warmup_steps", "0", size=4)
    result = build_store.run(script, args, model)
    assert "warm_start" not in result and result["questions"] == 4
    stored = open_store(script, must_exist=True).to_dataset(include_embeddings=False)
    assert set(stored["question_id"]) == set(load_questions(script, "train")["question_id"])


class _WarmStartCalled(Exception):
    pass


def test_train_warm_starts_from_the_demonstrated_collection_beside_a_store_of_rl_questions(
        tmp_path, tiny_model_dir, monkeypatch):
    from rapo_trl.cli import train

    build_store.run(*_demo(tmp_path, size=4))
    seen = {}

    def warm_start(model_path, tokenizer, rows, store, *args, **kwargs):
        seen.update(rows=rows, store=store)
        raise _WarmStartCalled

    monkeypatch.setattr("rapo_trl.cli.warm_start.warm_start", warm_start)
    script, args, model = _demo(tmp_path, "train", "--model_name_or_path", str(tiny_model_dir),
                                "--output_dir", str(tmp_path / "model"), "--bf16", "false", size=4)
    with pytest.raises(_WarmStartCalled):
        train.run(script, args, model)
    assert seen["store"].collection.name == "traces-warm-start"
    assert set(seen["rows"]["question_id"]) == set(load_questions(script, "demo")["question_id"])
    assert len(warm_start_examples(seen["rows"], seen["store"], min_reward=1.0)) > 0


def test_sft_on_store_imitates_rl_questions_from_the_warm_start_with_one_sft_seed(tmp_path, tiny_model_dir,
                                                                                 monkeypatch):
    """SFT-then-RL: after the warm start (demonstrated stories), SFT on the store's trajectories of RL's own questions
    continues the warm start's adapter; ``sft_seed`` seeds both, whatever RL's seed."""
    from rapo_trl.cli import train

    build_store.run(*_demo(tmp_path, size=4))
    calls = []

    def warm_start(model_path, tokenizer, rows, store, *args, **kwargs):
        calls.append(dict(rows=rows, store=store, **kwargs))
        if len(calls) == 2:
            raise _WarmStartCalled
        return str(tmp_path / "model" / "sft-warm-start")

    monkeypatch.setattr("rapo_trl.cli.warm_start.warm_start", warm_start)
    script, args, model = _demo(tmp_path, "train", "--model_name_or_path", str(tiny_model_dir),
                                "--output_dir", str(tmp_path / "model"), "--bf16", "false", "--seed", "3",
                                "--sft_store_steps", "5", "--sft_seed", "7", "--retrieve_prob", "0", size=4)
    with pytest.raises(_WarmStartCalled):
        train.run(script, args, model)
    warm, on_store = calls
    assert warm["store"].collection.name == "traces-warm-start" and warm.get("start_adapter") is None
    assert on_store["store"].collection.name == "traces"  # the collection retrieval reads: RL's own questions
    assert set(on_store["rows"]["question_id"]) == set(load_questions(script, "train")["question_id"])
    assert on_store["start_adapter"] == str(tmp_path / "model" / "sft-warm-start")
    assert on_store["folder"] == "sft-on-store" and on_store["steps"] == 5 and warm["steps"] == script.sft_warmup_steps
    assert warm["seed"] == on_store["seed"] == 7
    assert len(warm_start_examples(on_store["rows"], on_store["store"], min_reward=1.0)) > 0


def test_sft_on_a_store_of_other_questions_is_refused_before_any_sft_trains(tmp_path, tiny_model_dir, monkeypatch):
    """A store of the demonstrated stories alone has nothing for SFT on the store: refused before the warm start
    trains (it comes first), naming what is missing."""
    from rapo_trl.cli import train

    build_store.run(*_demo(tmp_path, "build-store", "--store_split", "demonstrated", size=4))
    monkeypatch.setattr("rapo_trl.cli.warm_start.warm_start", _warm_start_called)
    script, args, model = _demo(tmp_path, "train", "--model_name_or_path", str(tiny_model_dir),
                                "--output_dir", str(tmp_path / "model"), "--bf16", "false", "--store_split",
                                "demonstrated", "--sft_store_steps", "5", "--retrieve_prob", "0", size=4)
    with pytest.raises(UsageError, match=r"SFT on the store \(sft_store_steps\) imitates the stored trajectories "
                                         r"\(reward >= 1\) of RL's own questions \(split 'reward_only'\), but the "
                                         r"store collection 'traces' at .* holds no trajectory of any of them: .*"
                                         r"store_split equal to train_split.*or set sft_store_steps to 0"):
        train.run(script, args, model)


def _warm_start_called(*args, **kwargs):
    raise _WarmStartCalled
