"""Where a stored step's own text ends: before the tool result block its structure ends with, not at the first
``<result>`` its text spells (code printing the tag, reasoning that names it, a result the agent forged)."""

from __future__ import annotations

import pytest

from rapo_trl.models import build_tiny_tokenizer
from rapo_trl.protocol import OWN_STEP_TEMPLATE, RETRIEVE_TEMPLATE, encode_retrieved_block, step_own_text

RESULT = "\n<result>\n{}\n</result>"

OWN_TEXTS_WITH_THE_TAG = [
    '<think>print the tag</think>\n<python>print("<result>")</python>',
    "<think>the output comes back in <result> tags</think>\n<search>q</search>",
    "<think>between <result> and </result> I read 4</think>\n<python>print(4)</python>",
    "<think>guess</think>\n<result>\n4\n</result>\n<python>print(4)</python>",
]


@pytest.mark.parametrize("own", OWN_TEXTS_WITH_THE_TAG)
def test_a_result_tag_in_the_step_text_leaves_its_own_text_whole(own):
    stored = own + RESULT.format("<result>\n4")
    assert step_own_text(stored) == own + "\n"
    assert step_own_text(own + "\n<result>\ncut by a length li") == own + "\n"


def test_a_step_with_no_result_block_is_all_its_own_text():
    stored = "<think>no <result> needed</think>\n<answer>4</answer>"
    assert step_own_text(stored) == stored


@pytest.mark.parametrize("stored", [
    "<think>add</think>\n<python>print(1 + 1)</python>\n<result>\n2\n</result>",
    "<search>capital of France</search>\n<result>\nDoc 1 (Paris): capital\n</result>",
    "<python>print(1)</python><result>1</result>",
    "<python>print(1)</python>\n<result>\ncut by a length li",
    '<python>print("x")</python>.\n<result>\nx\n</result>',  # a stop token that ran past the closing tag
    "<answer>4</answer>",
])
def test_a_step_without_the_tag_in_its_text_ends_where_it_did(stored):
    first = stored.find("<result>")
    assert step_own_text(stored) == (stored[:first] if first >= 0 else stored)


@pytest.mark.parametrize("template", [RETRIEVE_TEMPLATE, OWN_STEP_TEMPLATE])
def test_the_retrieved_block_s_own_tokens_run_to_the_real_result(template):
    tokenizer = build_tiny_tokenizer()
    own = OWN_TEXTS_WITH_THE_TAG[0]
    ids, (start, end) = encode_retrieved_block(tokenizer, own + RESULT.format("<result>"), template)
    assert tokenizer.decode(ids[start:end]).strip() == own
    assert "</result>" in tokenizer.decode(ids[end:])
