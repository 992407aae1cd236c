"""Answer-only rewards (EM, F1, math equivalence, numeric closeness), combining rewards, and the rollout contract."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import pytest

from rapo_trl.rewards import (
    RETRIEVE_PREFACE,
    combine_rewards,
    exact_match_reward,
    f1_reward,
    make_numeric_closeness_reward,
    math_equivalence_reward,
    numeric_closeness,
    numeric_closeness_reward,
    rapo_outcome_reward,
)


def call(func, texts, golds, conversational=False):
    completions = [[{"role": "assistant", "content": t}] for t in texts] if conversational else texts
    return func(
        prompts=["q"] * len(texts), completions=completions, completion_ids=[[0]] * len(texts), answer=golds
    )


@pytest.mark.parametrize("conversational", [False, True])
def test_exact_match_and_f1(conversational):
    texts = ["<answer>\\boxed{The Cat}</answer>", "<answer>\\boxed{black cat}</answer>", "no answer at all"]
    golds = ["cat", ["dog", "cat"], "cat"]
    assert call(exact_match_reward, texts, golds, conversational) == [1.0, 0.0, 0.0]
    assert call(f1_reward, texts, golds, conversational) == pytest.approx([1.0, 2 / 3, 0.0])


def test_answer_rewards_need_no_format():
    assert call(exact_match_reward, ["just \\boxed{42}"], ["42"]) == [1.0]


def test_answer_rewards_ignore_retrieved_answers():
    text = f"{RETRIEVE_PREFACE}\n<retrieve>\n<answer>\\boxed{{42}}</answer>\n</retrieve>\n<answer>\\boxed{{7}}</answer>"
    assert call(exact_match_reward, [text], ["42"]) == [0.0]


@pytest.mark.parametrize(
    "text,gold,expected",
    [
        ("<answer>\\boxed{\\frac{1}{2}}</answer>", "0.5", 1.0),
        ("<answer>\\boxed{1000}</answer>", "Half of 2000. #### 1,000", 1.0),
        ("<answer>\\boxed{18}</answer>", "#### 18", 1.0),
        ("<answer>\\boxed{2\\sqrt{2}}</answer>", "\\sqrt{8}", 1.0),
        ("<answer>\\boxed{17}</answer>", "18", 0.0),
        ("no answer", "18", 0.0),
        ("<answer>\\boxed{0.00001}</answer>", 1e-05, 1.0),  # a float gold, which Python writes 1e-05
        ("<answer>\\boxed{x}</answer>", "The worked solution gives \\boxed{x}", 1.0),
    ],
)
def test_math_equivalence(text, gold, expected):
    assert call(math_equivalence_reward, [text], [gold]) == [expected]


def test_math_equivalence_off_the_main_thread():
    # math-verify's own timeouts need the main thread; the reward must still work in a worker.
    with ThreadPoolExecutor(1) as pool:
        result = pool.submit(
            call, math_equivalence_reward, ["<answer>\\boxed{0.5}</answer>"], ["1/2"]
        ).result()
    assert result == [1.0]


def test_names_for_trl_logs():
    assert [f.__name__ for f in (exact_match_reward, f1_reward, math_equivalence_reward, numeric_closeness_reward)] == [
        "exact_match_reward",
        "f1_reward",
        "math_equivalence_reward",
        "numeric_closeness_reward",
    ]
    assert make_numeric_closeness_reward(2.0, name="near").__name__ == "near"


@pytest.mark.parametrize(
    "prediction,gold,expected",
    [
        ("1250", "1250", 1.0),
        ("1,250", "1250", 1.0),  # thousands separators
        ("2,3", "23", 0.0),  # a list, not a number with a thousands separator
        (".5", "0.5", 1.0),
        (" 1250. ", "1250", 1.0),
        ("12.5", "12.5", 1.0),
        ("0", "0", 1.0),
        ("-40", "-40", 1.0),
        ("40", "-40", 0.0),  # opposite signs: no credit however near
        ("\u221240", "-40", 1.0),  # the Unicode minus sign
        ("1{,}250", "1250", 1.0),  # LaTeX's thousands separator
        ("9", "99", 0.0),  # a whole order of magnitude off (log10(10) vs log10(100))
        ("1250 coins", "1250", 0.0),  # not a plain number
        ("x", "5", 0.0),
        ("inf", "5", 0.0),
    ],
)
def test_numeric_closeness_values(prediction, gold, expected):
    assert numeric_closeness(prediction, gold) == pytest.approx(expected)


def test_numeric_closeness_falls_with_distance_in_orders_of_magnitude():
    gold = "10000"
    scores = [numeric_closeness(p, gold) for p in ("10000", "10100", "12000", "20000", "60000", "200000")]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) == len(scores)
    assert 0.9 < scores[2] < 1.0 and scores[-1] == 0.0
    # The same ratio earns the same credit whatever the size (up to the +1 that keeps 0 finite).
    assert numeric_closeness("2000", "1000") == pytest.approx(numeric_closeness("200000", "100000"), abs=1e-3)
    # A wider window gives more credit for the same miss.
    assert numeric_closeness("20000", gold, decades=2.0) > numeric_closeness("20000", gold)
    with pytest.raises(ValueError, match="decades must be positive"):
        numeric_closeness("1", "1", decades=0)
    with pytest.raises(ValueError, match="decades must be positive"):
        make_numeric_closeness_reward(-1)


def test_numeric_closeness_reward_reads_the_boxed_answer():
    texts = [
        "<answer>\\boxed{10100}</answer>",
        "<result>\\boxed{10000}</result> <answer>\\boxed{5}</answer>",  # a tool result is not the answer
        "no answer at all",
        f"{RETRIEVE_PREFACE}\n<retrieve>\n<answer>\\boxed{{10000}}</answer>\n</retrieve>\n",  # retrieved: ignored
    ]
    scores = call(numeric_closeness_reward, texts, ["10000", "10000", "10000", ["7", "10000"]])
    assert scores[0] == pytest.approx(numeric_closeness("10100", "10000")) and scores[0] > 0.99
    assert scores[1:] == [0.0, 0.0, 0.0]
    assert call(numeric_closeness_reward, ["<answer>\\boxed{7}</answer>"], [["10000", "7"]]) == [1.0]  # best gold


def test_combine_rewards():
    texts = ["<think>a</think><answer>\\boxed{42}</answer>", "<answer>\\boxed{42}</answer>"]
    combined = combine_rewards([rapo_outcome_reward, exact_match_reward], [1.0, 0.5])
    assert combined.__name__ == "rapo_outcome_reward+exact_match_reward"
    assert call(combined, texts, ["42", "42"]) == [1.5, -0.5]


def test_combine_rewards_propagates_missing_values():
    def sometimes_none(prompts, completions, completion_ids, **kwargs):
        return [None, math.nan, 1.0]

    assert call(combine_rewards([sometimes_none, f1_reward]), ["a", "b", "\\boxed{c}"], ["c"] * 3) == [
        None,
        None,
        2.0,
    ]


def test_combine_rewards_bad_input():
    with pytest.raises(ValueError, match="2 weights for 1 reward"):
        combine_rewards([f1_reward], [1.0, 2.0])
    with pytest.raises(ValueError, match="at least one"):
        combine_rewards([])


def test_rollout_engine_uses_the_same_preface_and_templates():
    """The rewards strip exactly what the rollout inserts; the experts write results as it does."""
    engine = pytest.importorskip("rapo_trl.rollout.engine")
    from rapo_trl.rewards import strip_retrieved_blocks
    from rapo_trl.tasks import RESULT_TEMPLATE

    config = engine.RolloutConfig()
    assert engine.RETRIEVE_PREFACE == RETRIEVE_PREFACE
    assert config.result_template == RESULT_TEMPLATE
    inserted = config.retrieve_template.format(text="<answer>\\boxed{1}</answer>")
    assert strip_retrieved_blocks("before" + inserted + "after") == "before\nafter"
