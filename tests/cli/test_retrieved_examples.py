"""Warm-start examples with a retrieved step: cut where RL retrieves, the block as the rollout engine encodes it and
left out of the loss, the steps after it learned."""

import json
from pathlib import Path

import pytest

from rapo_trl.cli.retrieved_examples import (
    IGNORED,
    STEP_SEPARATOR,
    ExampleTokenizer,
    RetrievedSplice,
    retrieval_splices,
    with_retrieved_examples,
)
from rapo_trl.protocol import encode_retrieved_block

FIRST = "<think>Two operations. First: a - b.</think>\n<python>\nprint(9 - 2)\n</python>\n<result>\n7\n</result>"
SECOND = "<think>step_1 = 7. Next: step_1 * 3.</think>\n<python>\nprint(7 * 3)\n</python>\n<result>\n21\n</result>"
ANSWER = "<think>The last call printed 21.</think>\n<answer>\\boxed{21}</answer>"
STEPS = [FIRST, SECOND, ANSWER]
PROMPT = [{"role": "user", "content": "Nine less two, times three?"}]


def test_after_the_plan_or_a_tool_step_the_next_step_is_retrieved_and_the_rest_stays_the_policys():
    plan, tool_step = retrieval_splices(STEPS)
    assert plan == RetrievedSplice("<think>Two operations. First: a - b.</think>", FIRST,
                                   SECOND + STEP_SEPARATOR + ANSWER)
    assert tool_step == RetrievedSplice(FIRST, SECOND, ANSWER)


def test_a_retrieval_never_hands_over_the_last_step():
    (plan,) = retrieval_splices([FIRST, ANSWER])  # after the tool step only the answer is left: no splice there
    assert plan.step == FIRST and plan.after == ANSWER
    assert retrieval_splices([ANSWER]) == []  # a plan with no tool call after it


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def test_a_whole_trajectory_is_tokenized_as_the_chat_template_renders_it(tokenizer):
    completion = STEP_SEPARATOR.join(STEPS)
    example = ExampleTokenizer(tokenizer).example(PROMPT, completion)
    rendered = tokenizer.apply_chat_template([*PROMPT, {"role": "assistant", "content": completion}],
                                             tokenize=True, return_dict=True)["input_ids"]
    prompt = tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, tokenize=True,
                                           return_dict=True)["input_ids"]
    assert example["input_ids"] == list(rendered)
    assert example["labels"][:len(prompt)] == [IGNORED] * len(prompt)
    assert example["labels"][len(prompt):] == example["input_ids"][len(prompt):]


def test_the_retrieved_block_holds_the_engines_ids_and_is_left_out_of_the_loss(tokenizer):
    splice = retrieval_splices(STEPS)[1]
    example = ExampleTokenizer(tokenizer).example(PROMPT, splice)
    block, _ = encode_retrieved_block(tokenizer, SECOND)
    ids, labels = example["input_ids"], example["labels"]
    prompt = tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, tokenize=True,
                                           return_dict=True)["input_ids"]
    assert ids[:len(prompt)] == list(prompt)
    block_positions = [k for k, label in enumerate(labels) if label == IGNORED and k >= len(prompt)]
    assert [ids[k] for k in block_positions] == block  # the rollout engine's encoding of the block, whole
    assert block_positions == list(range(block_positions[0], block_positions[0] + len(block)))
    learned = tokenizer.decode([i for i, label in zip(ids, labels) if label != IGNORED], skip_special_tokens=True)
    assert "print(9 - 2)" in learned and "\\boxed{21}" in learned  # the policy's steps before and after
    assert "print(7 * 3)" not in learned  # the retrieved step is never imitated


def test_a_share_of_the_questions_get_a_second_example_drawn_with_the_seed(tokenizer):
    questions = [(PROMPT, STEPS)] * 20
    none = with_retrieved_examples(questions, tokenizer, 0.0, seed=0)
    every = with_retrieved_examples(questions, tokenizer, 1.0, seed=0)
    some = with_retrieved_examples(questions, tokenizer, 0.5, seed=0)
    assert len(none) == 20 and len(every) == 40
    assert 20 < len(some) < 40
    assert some == with_retrieved_examples(questions, tokenizer, 0.5, seed=0)
    assert json.dumps(some) != json.dumps(with_retrieved_examples(questions, tokenizer, 0.5, seed=1))


def test_a_warm_start_with_retrieved_steps_trains_on_them_and_has_its_own_cache_key(tiny_model_dir, tokenizer,
                                                                                     tmp_path):
    from datasets import Dataset

    from rapo_trl.cli.warm_start import WARM_START_KEY_FILE, warm_start
    from rapo_trl.embeddings import HashingEmbedder
    from rapo_trl.store import TraceStore

    store = TraceStore(tmp_path / "store", embedder=HashingEmbedder())
    trajectory = STEP_SEPARATOR.join(STEPS)
    store.add_trajectories([trajectory, trajectory], [1.0, 1.0], ["q1", "q2"], prompts=["first", "second"])
    rows = Dataset.from_list([{"prompt": PROMPT, "question_id": qid} for qid in ("q1", "q2")])
    common = dict(steps=2, learning_rate=1e-3, min_reward=1.0, use_cpu=True, seed=0, bf16=False, batch_size=2)
    plain = warm_start(str(tiny_model_dir), tokenizer, rows, store, str(tmp_path / "plain"), **common)
    spliced = warm_start(str(tiny_model_dir), tokenizer, rows, store, str(tmp_path / "spliced"),
                         retrieved_share=1.0, **common)
    history = json.loads((tmp_path / "spliced" / "sft-warm-start" / "sft_history.json").read_text())
    assert history["examples"] == 4  # each question whole, and once with a step retrieved
    assert json.loads((tmp_path / "plain" / "sft-warm-start" / "sft_history.json").read_text())["examples"] == 2
    keys = [json.loads((Path(folder) / WARM_START_KEY_FILE).read_text())["key"] for folder in (plain, spliced)]
    assert keys[0] != keys[1]


def test_a_tool_of_the_users_own_ends_a_step_where_a_step_is_retrieved(tokenizer, tmp_path):
    """The store cuts a trajectory at the calls of every tool it was built with, and the rollout retrieves after
    each of them: the warm start's retrieved examples are cut there too, not at the built-in tools' calls alone."""
    from datasets import Dataset

    from rapo_trl.cli.warm_start import warm_start_examples
    from rapo_trl.embeddings import HashingEmbedder
    from rapo_trl.store import TraceStore

    first = "<think>Price per jar first.</think>\n<unit_price>jars</unit_price>\n<result>\n3\n</result>"
    second = "<think>Times seven jars.</think>\n<unit_price>7 jars</unit_price>\n<result>\n21\n</result>"
    steps = [first, second, ANSWER]
    assert [splice.step for splice in retrieval_splices(steps, ("unit_price",))] == [first, second]
    store = TraceStore(tmp_path / "store", embedder=HashingEmbedder())
    store.add_trajectories([STEP_SEPARATOR.join(steps)], [1.0], ["q1"], prompts=["first"], tool_tags=["unit_price"])
    rows = Dataset.from_list([{"prompt": PROMPT, "question_id": "q1"}])
    examples = warm_start_examples(rows, store, 1.0, tokenizer, retrieved_share=1.0, seed=0)
    assert len(examples) == 2  # the trajectory whole, and once with a step retrieved after a unit_price call
    assert IGNORED in examples[1]["labels"] and IGNORED in examples[0]["labels"]
