"""Rewards and tools of your own on the command line, by import path as `trl grpo --reward_funcs` takes them, and
the search tool over a corpus you give."""

from __future__ import annotations

import json
import textwrap

import pytest

from rapo_trl.cli import read_recipe
from rapo_trl.cli.common import UsageError, build_tools, training_rows
from rapo_trl.cli.rewards import training_rewards
from rapo_trl.rewards import rapo_outcome_reward

MODULE = textwrap.dedent('''
    from rapo_trl.rewards import exact_match_reward


    def length_reward(completions, **kwargs):
        return [-len(str(c)) / 100 for c in completions]


    async def wrong_answer_reward(completions, **kwargs):
        return [1.0 - score for score in exact_match_reward(completions=completions, **kwargs)]


    def double(x: int) -> int:
        """Double a number.

        Args:
            x: the number
        """
        return 2 * x


    class Shout:
        tag = "shout"
        timeout = 2.0

        def run(self, text):
            return text.upper()
''')


@pytest.fixture
def my_code(tmp_path, monkeypatch):
    (tmp_path / "my_code.py").write_text(MODULE)
    monkeypatch.chdir(tmp_path)  # importable from the working directory, as with `trl grpo`
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_reward_funcs_mix_builtin_names_and_import_paths(my_code):
    script, training, _ = read_recipe("train", ["--reward_funcs", "rapo_outcome", "my_code.length_reward",
                                                "--reward_weights", "1.0", "0.5"])
    functions, weights = training_rewards(script, training.reward_weights)
    assert functions[0] is rapo_outcome_reward and functions[1].__name__ == "length_reward"
    assert functions[1](["abcd"]) == [-0.04] and weights == [1.0, 0.5]
    with pytest.raises(UsageError, match="my_code has no nothing"):
        training_rewards(read_recipe("train", ["--reward", "my_code.nothing"])[0], None)
    with pytest.raises(UsageError, match="2 weights for 1 reward"):
        training_rewards(script.__class__(reward="f1"), [1.0, 2.0])


def test_build_store_keeps_the_trajectories_the_training_rewards_rank_best(my_code):
    """The store's best trajectories are the best by RL's own reward: the recipe's ``reward_funcs`` with its
    ``reward_weights`` (an async one awaited, as TRL awaits it), not ``reward``'s default, the outcome reward."""
    from rapo_trl.cli import build_store
    from rapo_trl.store import TraceStore

    script, training, model = read_recipe("build-store", [
        "--task", "arithmetic", "--train_size", "8", "--agent", "expert", "--expert_error_rate", "0.5",
        "--num_samples", "2", "--keep_top_k", "1", "--store_path", str(my_code / "store"),
        "--reward_funcs", "my_code.wrong_answer_reward", "--reward_weights", "2.0"])
    build_store.run(script, training, model)
    store = TraceStore(str(my_code / "store"))
    try:
        rewards = {record["reward"] for page in store.iter_batches() for record in page["metadatas"]}
    finally:
        store.close()
    # 2.0: a wrong answer, weighted; the outcome reward would have kept the right ones, rewarded 1.0
    assert rewards <= {0.0, 2.0} and 2.0 in rewards


def test_tools_by_import_path_and_the_prompt_teaches_them(my_code):
    script, _, _ = read_recipe("train", ["--tools", "python", "my_code.double", "my_code.Shout", "--train_size", "2"])
    python, double, shout = build_tools(script)
    assert (python.tag, double.tag, shout.tag) == ("python", "double", "shout")
    assert double.run('{"x": 4}') == "8" and shout.run("hi") == "HI"
    system = training_rows(script, "train", [python, double, shout])[0]["prompt"][0]["content"]
    assert "<python>" in system and "<double>" in system and "Double a number" in system
    with pytest.raises(UsageError, match="unknown tool"):
        read_recipe("train", ["--tools", "calculator"])


def test_search_over_a_corpus_you_give(tmp_path):
    corpus = tmp_path / "passages.jsonl"
    corpus.write_text("".join(json.dumps(p) + "\n" for p in [
        {"title": "Tower", "text": "The Eiffel Tower in Paris was completed in 1889."},
        {"title": "River", "text": "The Amazon carries more water than any other river."}]))
    script, _, _ = read_recipe("train", ["--task", "arithmetic", "--tools", "search", "--search_corpus", str(corpus)])
    (search,) = build_tools(script)
    assert search.run("When was the Eiffel Tower completed?").splitlines()[0].startswith("Doc 1 (Tower)")
    with pytest.raises(UsageError, match="search tool needs a corpus"):
        read_recipe("train", ["--task", "arithmetic", "--tools", "search"])
