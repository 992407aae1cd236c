"""RAPO's outcome reward (docs/design.md, Outcome reward) called the way TRL calls it."""

from __future__ import annotations

import logging
import pickle

import pytest

from rapo_trl.rewards import RETRIEVE_PREFACE, make_rapo_outcome_reward, rapo_outcome_reward

THINK = "<think>plan</think>\n"
PY = "<python>\nprint(6 * 7)\n</python>\n<result>\n42\n</result>\n"
SEARCH = "<search>q</search>\n<result>\nDoc 1 (Zorvia): text\n</result>\n"
ADD = '<add>{"a": 40, "b": 2}</add>\n<result>\n42\n</result>\n'  # a function tool's call


def answer(value: str) -> str:
    return f"<answer>The answer is \\boxed{{{value}}}.</answer>"


def retrieved(step: str) -> str:
    return f"\n{RETRIEVE_PREFACE}\n<retrieve>\n{step}\n</retrieve>\n"


def score(text, gold, reward=rapo_outcome_reward, column="answer"):
    return reward(prompts=["q"], completions=[text], completion_ids=[[0]], **{column: [gold]})[0]


CASES = [
    ("exact, no tool", THINK + answer("Talmir"), "Talmir", 1.0),
    ("exact, one tool", THINK + PY + answer("42"), "42", 1.0),
    ("exact, both tools: bonus", THINK + SEARCH + PY + answer("42"), "42", 1.1),
    ("wrong, both tools: no bonus", THINK + SEARCH + PY + answer("41"), "42", 0.0),
    ("partial F1", THINK + answer("Talmir"), "Talmir harbour", 2 / 3),
    ("partial F1 plus bonus", THINK + SEARCH + PY + answer("Talmir"), "Talmir harbour", 2 / 3 + 0.1),
    ("SQuAD normalisation", THINK + answer("The  Cat!"), "cat", 1.0),
    ("thousands separator", THINK + answer("1,000"), "1000", 1.0),
    ("best of several golds", THINK + answer("Sam Vex"), ["Samuel Vex", "Sam Vex", "Vex"], 1.0),
    ("gold as a number", THINK + answer("42"), 42, 1.0),
    # A number is one token, kept whole: its sign, decimal point and fraction bar count; its spelling does not.
    ("decimal point kept", THINK + PY + answer("2.5"), "25", 0.0),
    ("decimal point kept, other way", THINK + PY + answer("15"), "1.5", 0.0),
    ("sign kept", THINK + PY + answer("-3"), "3", 0.0),
    ("fraction bar kept", THINK + PY + answer("1/2"), "12", 0.0),
    ("trailing zeros", THINK + PY + answer("18.00"), "18", 1.0),
    ("a float gold, as a JSON column of decimals loads it", THINK + PY + answer("25"), 25.0, 1.0),
    ("a small float gold, which Python writes 1e-05", THINK + PY + answer("0.00001"), 1e-05, 1.0),
    ("a large float gold, which Python writes 1e+16", THINK + PY + answer("10000000000000000"), 1e16, 1.0),
    ("negative decimal", THINK + PY + answer("-0.50"), "-0.5", 1.0),
    ("leading decimal point", THINK + PY + answer(".5"), "0.5", 1.0),
    ("leading decimal point kept", THINK + PY + answer(".5"), "5", 0.0),
    ("negative leading decimal point", THINK + PY + answer("-.5"), "-0.5", 1.0),
    # Commas between digits are thousands separators only in groups of three: otherwise they separate a list.
    ("a list is not one number", THINK + PY + answer("2,3"), "23", 0.0),
    ("a list, spaced or not", THINK + PY + answer("(1,2)"), "(1, 2)", 1.0),
    ("thousands separators, several groups", THINK + PY + answer("1,234,567"), "1234567", 1.0),
    # The spellings of a number math-verify reads (as rapo eval scores it): the Unicode minus sign, LaTeX's commas.
    ("Unicode minus sign", THINK + PY + answer("\u22123"), "-3", 1.0),
    ("Unicode minus sign kept", THINK + PY + answer("\u22123"), "3", 0.0),
    ("LaTeX thousands separator", THINK + PY + answer("1{,}250"), "1250", 1.0),
    ("LaTeX thousands separator with a negative space", THINK + PY + answer("1,\\!250"), "1,250", 1.0),
    ("LaTeX comma between two numbers", THINK + PY + answer("2{,}3"), "23", 0.0),
    # An answer that is one article (a multiple-choice letter) keeps it: dropped, it would equal an empty answer.
    ("letter answer", THINK + answer("(A)"), "A", 1.0),
    ("empty answer is not the letter A", THINK + answer(""), "A", 0.0),
    ("an article alone is not the letter A", THINK + answer("the"), "A", 0.0),
    ("letter answer among words", THINK + answer("a cat"), "cat", 1.0),
    ("a number inside words", THINK + answer("12.5 apples"), "12.5", 2 / 3),
    ("GSM8K solution as gold", THINK + answer("1000"), "so it is 10*100 #### 1,000", 1.0),
    ("last boxed in the answer counts", THINK + "<answer>\\boxed{41} no, \\boxed{42}</answer>", "42", 1.0),
    ("nested braces", THINK + answer("\\frac{1}{2}"), "\\frac{1}{2}", 1.0),
    ("double answer", THINK + answer("42") + answer("42"), "42", -1.0),
    ("python without close", THINK + "<python>print(1)\n" + answer("42"), "42", -1.0),
    ("missing result", THINK + "<search>q</search>\n" + answer("42"), "42", -1.0),
    ("</think> without open", "plan</think>" + answer("42"), "42", -1.0),
    ("no boxed", THINK + "<answer>42</answer>", "42", -1.0),
    ("exact, function tool", THINK + ADD + answer("42"), "42", 1.0),
    ("partial F1, function tool", THINK + ADD + answer("Talmir"), "Talmir harbour", 2 / 3),
    ("function tool and python: no bonus", THINK + ADD + PY + answer("42"), "42", 1.0),
    ("function tool and both tools: bonus", THINK + SEARCH + ADD + PY + answer("42"), "42", 1.1),
    ("unclosed function call", THINK + '<add>{"a": 40}\n<result>\n42\n</result>\n' + answer("42"), "42", -1.0),
    ("answer used as a call", THINK + answer("42") + "\n<result>\n42\n</result>", "42", -1.0),
]


@pytest.mark.parametrize("text,gold,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_outcome_reward(text, gold, expected):
    assert score(text, gold) == pytest.approx(expected)


def test_plain_and_conversational_completions_score_alike():
    texts = [THINK + SEARCH + PY + answer("42"), THINK + answer("7"), answer("42")]
    plain = rapo_outcome_reward(
        prompts=["q"] * 3, completions=texts, completion_ids=[[0]] * 3, answer=["42"] * 3
    )
    conversational = rapo_outcome_reward(
        prompts=[[{"role": "user", "content": "q"}]] * 3,
        completions=[[{"role": "assistant", "content": t}] for t in texts],
        completion_ids=[[0]] * 3,
        answer=["42"] * 3,
    )
    assert plain == conversational == pytest.approx([1.1, 0.0, -1.0])


@pytest.mark.parametrize("column", ["answer", "answers", "solution"])
def test_gold_column_names(column):
    assert score(THINK + answer("42"), ["42"], column=column) == 1.0


def test_missing_gold_column_is_a_clear_error():
    with pytest.raises(ValueError, match="needs one of the columns answer, answers, solution"):
        rapo_outcome_reward(prompts=["q"], completions=["x"], completion_ids=[[0]], question=["q"])


def test_retrieved_answer_is_not_double_counted_by_default():
    text = (
        THINK + PY + retrieved("<think>stored</think>" + answer("42")) + "<think>go on</think>" + answer("42")
    )
    assert score(text, "42") == 1.0
    # Scored with retrieved blocks (the reference code's way) the second <answer> breaks the format.
    assert score(text, "42", reward=make_rapo_outcome_reward(strip_retrieved=False)) == -1.0


def test_retrieved_answer_alone_does_not_count_by_default():
    text = THINK + PY + retrieved("<think>stored</think>" + answer("42"))
    assert score(text, "42") == -1.0
    assert score(text, "42", reward=make_rapo_outcome_reward(strip_retrieved=False)) == 1.0


def test_retrieved_tool_call_does_not_earn_the_bonus():
    text = THINK + PY + retrieved(SEARCH) + answer("42")
    assert score(text, "42") == 1.0
    assert score(text, "42", reward=make_rapo_outcome_reward(strip_retrieved=False)) == pytest.approx(1.1)


def test_retrieved_function_call_does_not_count():
    # A stored step's call of a function the policy never called: stripped, its result is not the policy's.
    text = THINK + PY + retrieved('<add>{"a": 1, "b": 2}</add>\n<result>\n3\n</result>') + answer("42")
    assert score(text, "42") == 1.0
    assert score(text, "42", reward=make_rapo_outcome_reward(strip_retrieved=False)) == 1.0
    # Its call cut off by the block's end would break the format if it were scored.
    cut = THINK + ADD + retrieved('<add>{"a": 1') + answer("42")
    assert score(cut, "42") == 1.0
    assert score(cut, "42", reward=make_rapo_outcome_reward(strip_retrieved=False)) == -1.0


def test_explicit_tool_tags():
    unanswered = THINK + '<add>{"a": 40, "b": 2}</add>\n' + answer("42")
    assert score(unanswered, "42") == 1.0  # a tag never followed by a result is ordinary text
    strict = make_rapo_outcome_reward(tool_tags=["python", "search", "add"])
    assert strict.tool_tags == ("python", "search", "add")
    assert "tool_tags=('python', 'search', 'add')" in repr(strict)
    assert score(unanswered, "42", reward=strict) == -1.0
    assert score(THINK + SEARCH + ADD + PY + answer("42"), "42", reward=strict) == pytest.approx(1.1)
    assert score(THINK + ADD + answer("42"), "42", reward=make_rapo_outcome_reward(tool_tags=["python"])) == -1.0
    assert pickle.loads(pickle.dumps(strict)).tool_tags == strict.tool_tags
    with pytest.raises(ValueError, match="reserved"):
        make_rapo_outcome_reward(tool_tags=["answer"])


def test_factory_settings():
    reward = make_rapo_outcome_reward(multi_tool_bonus=0.5, format_penalty=-2.0, name="strict")
    assert reward.__name__ == "strict"
    assert reward.max_reward == 1.5
    assert score(THINK + SEARCH + PY + answer("42"), "42", reward=reward) == 1.5
    assert score(answer("42"), "42", reward=reward) == -2.0
    assert rapo_outcome_reward.__name__ == "rapo_outcome_reward"
    assert rapo_outcome_reward.max_reward == pytest.approx(1.1)


def test_format_failure_is_explained_in_the_debug_log(caplog):
    with caplog.at_level(logging.DEBUG, logger="rapo_trl.rewards"):
        score(THINK + answer("1") + answer("1"), "1")
    assert "found 2 <answer>" in caplog.text


def test_format_failure_rate_goes_to_trl_metrics():
    logged = []
    texts = [THINK + answer("1"), answer("1"), "x", THINK + answer("2")]
    rapo_outcome_reward(
        prompts=["q"] * 4,
        completions=texts,
        completion_ids=[[0]] * 4,
        answer=["1"] * 4,
        log_metric=lambda name, value: logged.append((name, value)),
    )
    assert logged == [("rapo_outcome_reward/format_failure_rate", 0.5)]


def test_reward_pickles():
    # TRL may ship reward functions to other processes.
    assert pickle.loads(pickle.dumps(rapo_outcome_reward)).__name__ == "rapo_outcome_reward"
