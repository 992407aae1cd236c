"""Held-out evaluation: Wilson intervals, scoring, the markdown table, batched greedy rollouts of a live model."""

from __future__ import annotations

import warnings

import pytest
from datasets import Dataset

from rapo_trl.evaluation import (
    evaluate_policy,
    format_table,
    mean_at_k,
    passes,
    score_texts,
    set_scoring,
    wilson_interval,
)
from tests.helpers.fakes import EchoTool
from tests.helpers.scripted import ScriptedGenerate, Turn


@pytest.mark.parametrize(
    ("k", "n", "expected"),
    [
        (0, 64, (0.0, 0.0566)),  # upper end z^2 / (n + z^2) = 3.8416 / 67.8416
        (64, 64, (0.9434, 1.0)),
        (32, 64, (0.3810, 0.6190)),  # 0.5 -+ z sqrt(1/4n + z^2/4n^2) / (1 + z^2/n)
    ],
)
def test_wilson_interval_matches_hand_computed_values(k, n, expected):
    lo, hi = wilson_interval(k, n)
    assert lo == pytest.approx(expected[0], abs=1e-4) and hi == pytest.approx(expected[1], abs=1e-4)


def test_wilson_interval_of_nothing_is_empty():
    assert wilson_interval(0, 0) == (0.0, 0.0)


def answer(value):
    return f"<think>ok</think>\n<answer>\\boxed{{{value}}}</answer>"


def test_score_texts_counts_numeric_equivalence_and_format():
    scores = score_texts([answer("12"), answer("12.0"), answer("13"), "no tags"], ["12"] * 4, numeric=True)
    assert scores["correct"] == 2 and scores["n"] == 4 and scores["pass@1"] == 0.5
    assert scores["format_ok"] == 0.75
    assert scores["correct_by_question"] == [1, 1, 0, 0]  # in the texts' order, to pair models per question
    lo, hi = scores["pass@1_ci95"]
    assert lo < 0.5 < hi
    # exact match only when the task is not numeric: one number written two ways, not an equal expression
    assert score_texts([answer("12.0")], ["12"], numeric=False)["correct"] == 1
    assert score_texts([answer("1/2")], ["0.5"], numeric=False)["correct"] == 0
    assert score_texts([answer("1/2")], ["0.5"], numeric=True)["correct"] == 1


def test_format_table_shows_counts_and_interval():
    table = format_table({"trained": {"pass@1": 0.5, "pass@1_ci95": [0.38, 0.62], "correct": 32, "n": 64,
                                      "f1": 0.5, "em": 0.5, "format_ok": 1.0, "tool_calls": 1.0}}, "task, n=64")
    header, rule, row = table.splitlines()
    assert header.startswith("| model (task, n=64) | pass@1 | 95% CI |")
    assert row == "| trained | 0.500 (32/64) | 0.380-0.620 | 0.500 | 0.500 | 1.000 | 1.000 |"


def test_evaluate_policy_runs_greedy_tool_rollouts_in_batches(tiny_model):
    model, tok = tiny_model
    rows = Dataset.from_list([
        {"prompt": [{"role": "user", "content": f"question {i}"}], "answer": str(i)} for i in range(5)
    ])
    # Row i calls the tool, then answers i (rows 0-2) or a wrong value (rows 3-4).
    scripts = [[Turn("<python>x</python>"), Turn(answer(i if i < 3 else 99))] for i in range(5)]
    prompts = [tok.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=False)
               for p in rows["prompt"]]
    model.generate = ScriptedGenerate(tok, {tuple(p): s for p, s in zip(prompts, scripts)}, model.config.vocab_size)
    model.train()
    result = evaluate_policy(model, tok, rows, [EchoTool()], max_completion_length=128, max_turn_tokens=32,
                             batch_size=2, progress=False)
    assert result["correct"] == 3 and result["n"] == 5 and result["pass@1"] == 0.6
    assert result["correct_by_question"] == [1, 1, 1, 0, 0]
    assert result["tool_calls"] == 1.0 and result["truncated"] == 0.0
    assert len(result["texts"]) == 5 and result["texts"][4].endswith(answer(99))
    assert model.generate.calls == 6  # 3 batches (2 + 2 + 1 rows) x 2 turns
    assert model.training  # evaluating a model mid-training leaves it in training mode


@pytest.mark.parametrize("max_tool_calls, max_result_chars", [(1, 60), (3, None)])
def test_evaluate_policy_rolls_out_with_the_tool_budget_and_result_cut_it_is_given(tiny_model, max_tool_calls,
                                                                                  max_result_chars):
    """`rapo eval` scores a model with its recipe's tool budget and result cut: a second call past a budget of one
    gets the limit notice, not a result, and a long result is cut only where a cut is set."""
    model, tok = tiny_model
    rows = Dataset.from_list([{"prompt": [{"role": "user", "content": "question"}], "answer": "1"}])
    long_input = " ".join(["word"] * 12)  # its result, out(...), is 63 characters
    scripts = [Turn(f"<python>{long_input}</python>"), Turn("<python>again</python>"), Turn(answer(1))]
    model.generate = ScriptedGenerate(tok, [([], scripts)], model.config.vocab_size)
    tool = EchoTool()
    result = evaluate_policy(model, tok, rows, [tool], max_completion_length=400, max_turn_tokens=128,
                             progress=False, max_tool_calls=max_tool_calls, max_result_chars=max_result_chars)
    text = result["texts"][0]
    assert len(tool.seen) == max(1, min(2, max_tool_calls))
    assert ("Tool-call limit reached" in text) == (max_tool_calls == 1)
    assert (f"out({long_input})" in text) == (max_result_chars is None)
    assert ("characters cut" in text) == (max_result_chars is not None)


def test_mean_at_k_averages_samples_per_question_with_a_question_clustered_interval():
    # 4 questions x k=4: pass rates 1, 0.5, 0.25, 0 -> mean@4 = 0.4375.
    passed = [1, 1, 1, 1] + [1, 0, 1, 0] + [0, 0, 1, 0] + [0, 0, 0, 0]
    result = mean_at_k([bool(p) for p in passed], k=4)
    assert result["mean@k"] == pytest.approx(0.4375) and result["questions"] == 4 and result["samples"] == 16
    assert result["sampled_correct_by_question"] == [4, 2, 1, 0]
    # Var of (1, .5, .25, 0) with n-1 = 0.1823; deff = 4 * 0.1823 / (0.4375 * 0.5625) = 2.963
    assert result["design_effect"] == pytest.approx(2.963, abs=1e-3)
    lo, hi = result["mean@k_ci95"]
    assert (lo, hi) == pytest.approx(wilson_interval(0.4375 * 16 / 2.963, 16 / 2.963), abs=1e-4)
    # Samples that agree within each question count like one sample per question; independent-looking
    # samples (the same rate everywhere) count fully.
    clustered = mean_at_k([True] * 8 + [False] * 8, k=8)
    spread = mean_at_k([True, False] * 8, k=8)
    assert clustered["mean@k"] == spread["mean@k"] == 0.5
    assert clustered["design_effect"] == 8 and spread["design_effect"] == 1
    width = lambda r: r["mean@k_ci95"][1] - r["mean@k_ci95"][0]  # noqa: E731
    assert width(clustered) > 1.5 * width(spread)
    assert mean_at_k([False] * 12, k=4)["mean@k_ci95"] == [0.0, pytest.approx(wilson_interval(0, 3)[1], abs=1e-4)]
    with pytest.raises(ValueError, match="k=4"):
        mean_at_k([True] * 6, k=4)


def test_mean_at_k_interval_is_of_the_mean_not_of_a_rounded_count():
    # 3/8 and 8/8: mean@8 = 0.6875 over n_eff = 2.2; rounded, it would be Wilson's of 2/2, reaching 1.0
    result = mean_at_k([True] * 3 + [False] * 5 + [True] * 8, k=8)
    n_eff = 16 / result["design_effect"]
    assert result["mean@k_ci95"] == pytest.approx(list(wilson_interval(0.6875 * n_eff, n_eff)), abs=1e-3)
    assert result["mean@k_ci95"][1] < 0.99


def test_evaluate_policy_samples_k_rollouts_per_question_for_mean_at_k(tiny_model):
    model, tok = tiny_model
    rows = Dataset.from_list([{"prompt": [{"role": "user", "content": f"q {i}"}], "answer": str(i)} for i in range(3)])
    prompts = [tok.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=False)
               for p in rows["prompt"]]
    # Question 0's samples alternate right and wrong, question 1's are all right; question 2 is not sampled.
    scripts = [(prompts[0], [Turn(answer(0 if j % 2 == 0 else 99))]) for j in range(4)]
    scripts += [(prompts[1], [Turn(answer(1))]) for _ in range(4)]
    model.generate = ScriptedGenerate(tok, scripts, model.config.vocab_size)
    result = evaluate_policy(model, tok, rows, [EchoTool()], max_completion_length=64, max_turn_tokens=32,
                             batch_size=4, progress=False, samples=4, sample_questions=2, greedy=False)
    assert "pass@1" not in result
    assert result["mean@k"] == 0.75 and result["k"] == 4 and result["questions"] == 2 and result["samples"] == 8
    assert result["sampled_correct_by_question"] == [2, 4]  # of 4 samples each; the unsampled question is not listed
    assert model.generate.calls == 2  # 8 sampled rollouts in batches of 4
    table = format_table({"trained": result}, "t")
    assert "mean@4" in table.splitlines()[0] and "| trained | - | - | 0.750 |" in table


@pytest.mark.parametrize("scoring, task, answers, expected", [
    ("auto", "dataset", ["2", "-3", "1,000", "2.5", "1/2", ["4", "four"]], "exact"),  # one gold is no number
    ("auto", "dataset", ["2", "-3", "1,000", "2.5", "1/2", ["4", "4.0"]], "math"),
    ("auto", "dataset", ["Paris", "42"], "exact"),
    ("auto", "dataset", ["\u22123", "1{,}000", "1,\\!000"], "math"),  # math-verify reads these numbers
    ("auto", "jsonl", [{"text": ["7"]}], "math"),
    ("auto", "jsonl", [1e-05, 2.5], "math"),  # float golds, one of which Python writes 1e-05
    ("auto", "word_problems", ["seven"], "math"),  # a shipped numeric task, whatever its golds
    ("exact", "arithmetic", ["7"], "exact"),
    ("math", "dataset", ["\\frac{1}{2}"], "math"),
])
def test_a_set_is_scored_by_math_equivalence_when_every_gold_is_a_number(scoring, task, answers, expected):
    assert set_scoring(scoring, task, answers) == expected


def test_math_equivalence_passes_what_exact_match_does_not():
    texts = ["<answer>\\boxed{0.5}</answer>", "<answer>\\boxed{\\frac{1}{2}}</answer>"]
    assert passes(texts, ["1/2", "1/2"], numeric=True) == [True, True]
    assert passes(texts, ["1/2", "1/2"], numeric=False) == [False, False]
    with pytest.raises(ValueError, match="eval scoring must be one of"):
        set_scoring("fuzzy", "dataset", ["1"])


def test_exact_match_does_not_pass_an_empty_answer_for_a_letter_gold():
    """A multiple-choice letter is an article to SQuAD's normalisation: it is kept when it is the whole answer, so an
    empty or article-only answer does not pass for it."""
    texts = [answer(""), "<think>ok</think>\n<answer></answer>", answer("the"), answer("(A)"), answer("B")]
    assert passes(texts, ["A"] * 5, numeric=False) == [False, False, False, True, False]


def test_exact_match_reads_the_number_spellings_math_equivalence_reads():
    texts = [answer("\u22123"), answer("1{,}250"), answer("1,\\!250"), answer("\u22123")]
    golds = ["-3", "1250", "1250", "3"]
    assert passes(texts, golds, numeric=True) == [True, True, True, False]
    assert passes(texts, golds, numeric=False) == [True, True, True, False]


def _rng_states(torch) -> tuple:
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []
    return torch.get_rng_state(), cuda


def test_evaluate_policy_sampling_leaves_the_callers_global_rng_as_it_found_it(tiny_model):
    """An eval called mid-training seeds its own draws; reseeding torch's global generator would make every draw
    after each eval repeat the same random numbers."""
    import torch

    model, tok = tiny_model
    device = "cuda" if torch.cuda.is_available() else "cpu"  # on a GPU the CUDA generator is drawn from too
    model.to(device)
    rows = Dataset.from_list([{"prompt": [{"role": "user", "content": f"q {i}"}], "answer": str(i)} for i in range(2)])
    decoded = []
    decode = tok.decode
    tok.decode = lambda *a, **k: decoded.append(decode(*a, **k)) or decoded[-1]

    def sampled(seed):
        decoded.clear()
        evaluate_policy(model, tok, rows, [EchoTool()], max_completion_length=16, max_turn_tokens=8,
                        batch_size=4, progress=False, samples=2, greedy=False, seed=seed)
        return list(decoded)

    torch.manual_seed(1234)
    torch.rand(3)  # a caller's stream part-way along, not at a seed
    cpu_before, cuda_before = _rng_states(torch)
    first = sampled(seed=5)
    cpu_after, cuda_after = _rng_states(torch)
    assert torch.equal(cpu_before, cpu_after)
    assert len(cuda_before) == len(cuda_after)
    assert all(torch.equal(b, a) for b, a in zip(cuda_before, cuda_after))
    # Still reproducible: the same seed draws the same samples wherever the caller's stream stands.
    torch.rand(5)
    assert first and sampled(seed=5) == first


def test_evaluate_policy_samples_with_the_nucleus_top_k_and_penalty_it_is_given(tiny_model):
    """mean@k samples as training sampled: top_p, top_k, min_p and the repetition penalty reach generation (greedy
    pass@1 stays plain greedy), and the result records them beside the temperature."""
    model, tok = tiny_model
    rows = Dataset.from_list([{"prompt": [{"role": "user", "content": "q 0"}], "answer": "0"}])
    prompt = tok.apply_chat_template(rows["prompt"][0], add_generation_prompt=True, tokenize=True, return_dict=False)
    scripted = ScriptedGenerate(tok, [(prompt, [Turn(answer(0))]) for _ in range(3)], model.config.vocab_size)
    configs = []

    def recording_generate(*args, **kwargs):
        configs.append(kwargs["generation_config"])
        return scripted(*args, **kwargs)

    model.generate = recording_generate
    result = evaluate_policy(model, tok, rows, [EchoTool()], max_completion_length=64, max_turn_tokens=32,
                             batch_size=4, progress=False, samples=2, temperature=0.7, top_p=0.9, top_k=5,
                             min_p=0.05, repetition_penalty=1.1, generation_options={"typical_p": 0.95})
    greedy, sampled = configs
    assert not greedy.do_sample and greedy.top_p is None and greedy.top_k is None
    assert sampled.do_sample and (sampled.temperature, sampled.top_p, sampled.top_k) == (0.7, 0.9, 5)
    assert (sampled.min_p, sampled.repetition_penalty, sampled.typical_p) == (0.05, 1.1, 0.95)
    assert {key: result[key] for key in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")} == {
        "temperature": 0.7, "top_p": 0.9, "top_k": 5, "min_p": 0.05, "repetition_penalty": 1.1}
    assert result["generation_options"] == {"typical_p": 0.95}


def test_evaluate_policy_scores_a_repeated_question_once(tiny_model):
    """A question asked twice in the rows is one question: counted twice, it would weigh double in pass@1 and mean@k
    and narrow their intervals as if it were two independent ones."""
    model, tok = tiny_model
    questions = [0, 1, 0]  # the first question again as the third row
    rows = Dataset.from_list([{"prompt": [{"role": "user", "content": f"q {i}"}], "answer": str(i)} for i in questions])
    prompts = [tok.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=False)
               for p in rows["prompt"][:2]]
    # Question 0 is always answered right, question 1 always wrong: enough scripts for every rollout of either.
    scripts = [(prompts[0], [Turn(answer(0))]) for _ in range(6)]
    scripts += [(prompts[1], [Turn(answer(99))]) for _ in range(3)]
    model.generate = ScriptedGenerate(tok, scripts, model.config.vocab_size)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = evaluate_policy(model, tok, rows, [EchoTool()], max_completion_length=64, max_turn_tokens=32,
                                 batch_size=4, progress=False, samples=2)
    assert result["n"] == 2 and result["pass@1"] == 0.5 and result["correct_by_question"] == [1, 0]
    assert result["questions"] == 2 and result["mean@k"] == 0.5 and result["sampled_correct_by_question"] == [2, 0]
    assert result["duplicate_questions_dropped"] == 1
    assert [str(w.message) for w in caught if "repeated" in str(w.message)] == [
        "eval: 1 repeated question of 3 rows dropped (same prompt as an earlier row): each distinct question is "
        "scored once, so pass@1, mean@k and their intervals count it once"]
