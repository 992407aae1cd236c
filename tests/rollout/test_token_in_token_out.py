"""Property: the engine never re-tokenises. Whatever text tools and the store return, every forced
segment decodes to exactly the text it was built from, and the policy's sampled ids are kept as sampled."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.fakes import FixedStore, encode, make_engine
from tests.helpers.scripted import Turn

texts = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=0, max_size=40
)


class FixedOutputTool:
    tag = "python"
    timeout = 5.0

    def __init__(self, output):
        self.output = output

    def run(self, text):
        return self.output


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tool_output=texts, retrieved=texts, policy_tail=st.sampled_from(["end", " é 漢字 ", "\n\n", "</result>"]))
def test_forced_segments_decode_to_their_text(tiny_model, tool_output, retrieved, policy_tail):
    turns = [Turn("<python>x</python>"), Turn(policy_tail)]
    engine, prompts, tok = make_engine(
        tiny_model, [turns], store=FixedStore(text=retrieved), tools=[FixedOutputTool(tool_output)]
    )
    (row,) = engine.run(prompts, hybrid=[True])
    tool_seg, retrieved_seg = row.segments[1], row.segments[2]
    # The tokenizer's own normalizer (NFC here: e.g. U+F900 becomes U+8C48) is part of tokenising once.
    normalizer = tok.backend_tokenizer.normalizer
    tool_output, retrieved = (normalizer.normalize_str(t) if normalizer else t for t in (tool_output, retrieved))
    expected_tool = engine.config.result_template.format(output=tool_output)
    expected_retrieved = engine.config.retrieve_template.format(text=retrieved)
    assert tok.decode(row.completion_ids[tool_seg.start : tool_seg.end]) == expected_tool
    assert tok.decode(row.completion_ids[retrieved_seg.start : retrieved_seg.end]) == expected_retrieved
    # The sampled ids are exactly what generation produced, not a re-encoding of decoded text.
    assert row.completion_ids[: tool_seg.start] == encode(tok, "<python>x</python>")
    assert row.completion_ids[retrieved_seg.end :] == encode(tok, policy_tail)[: len(row.completion_ids)]
    # The whole sequence decodes to the concatenation of its parts' texts.
    assert tok.decode(row.completion_ids) == "<python>x</python>" + expected_tool + expected_retrieved + policy_tail


def test_forced_text_that_the_tokenizer_normalises(tiny_model):
    """A compatibility ideograph in a tool result (NFC maps U+F900 to U+8C48) decodes as the tokenizer
    normalises it, and the rollout still splices it as one forced segment."""
    turns = [Turn("<python>x</python>"), Turn("end")]
    engine, prompts, tok = make_engine(tiny_model, [turns], store=FixedStore(text="ok"),
                                       tools=[FixedOutputTool("\uf900")])
    (row,) = engine.run(prompts, hybrid=[True])
    tool_seg = row.segments[1]
    assert tok.decode(row.completion_ids[tool_seg.start : tool_seg.end]) == \
        engine.config.result_template.format(output="\u8c48")


def test_special_token_text_in_a_tool_result_stays_text(tiny_model):
    """A tool's output holding the EOS or pad token's text (a search corpus, a printed string) is text in the result,
    as in a retrieved block: never the EOS or pad id, which would end the policy's turn in the model's eyes and make
    TRL count a row the budget cut inside the result as terminated (its last id an EOS), not clipped."""
    model, tok = tiny_model
    output = "before" + tok.eos_token + tok.pad_token + "after"
    step = "<python>x</python>"
    engine, prompts, tok = make_engine(tiny_model, [[Turn(step), Turn("end")]], tools=[FixedOutputTool(output)])
    (row,) = engine.run(prompts, hybrid=[False])
    tool_seg = row.segments[1]
    special = {tok.eos_token_id, tok.pad_token_id}
    assert not special & set(row.completion_ids[tool_seg.start : tool_seg.end])
    assert tok.decode(row.completion_ids[tool_seg.start : tool_seg.end]) == \
        engine.config.result_template.format(output=output)

    # The budget ends where the EOS's text ends inside the result: the row is cut, and its last id says so to TRL.
    head = "\n<result>\nbefore" + tok.eos_token
    budget = len(encode(tok, step)) + len(tok(head, add_special_tokens=False, split_special_tokens=True)["input_ids"])
    engine, prompts, tok = make_engine(tiny_model, [[Turn(step), Turn("never")]], tools=[FixedOutputTool(output)],
                                       max_completion_length=budget)
    (row,) = engine.run(prompts, hybrid=[False])
    assert row.truncated and len(row.completion_ids) == budget
    assert row.completion_ids[-1] not in special
