"""The ids of a retrieved block, as the rollout engine inserts them and as the SFT warm start shows them."""

from __future__ import annotations

from rapo_trl.protocol import RESULT_TEMPLATE, RETRIEVE_TEMPLATE


def encode_retrieved_block(tokenizer, text: str, retrieve_template: str = RETRIEVE_TEMPLATE,
                           result_template: str = RESULT_TEMPLATE) -> tuple[list[int], tuple[int, int] | None]:
    """The retrieved block's ids, and which of them (start, end) spell the stored step's own text: the part an agent
    wrote, without the preface, the ``<retrieve>`` tags or the step's tool result. Found from the tokenizer's
    character offsets of the one encoding of the block (the ids inserted are that encoding's); ``None`` when the
    tokenizer gives no offsets or no token lies wholly inside the step's text."""
    text = text.encode("utf-8", "replace").decode("utf-8")
    block = retrieve_template.format(text=text)
    head = retrieve_template.partition("{text}")[0].replace("{{", "{").replace("}}", "}")
    result_head = result_template.partition("{output}")[0].strip()
    own = text.find(result_head) if result_head else -1
    char_start, char_end = len(head), len(head) + (own if own >= 0 else len(text))
    try:
        # A special token's text in a stored step (an end-of-turn marker) is text here: a retrieved block must
        # never end the policy's turn or open a message of the template.
        encoded = tokenizer(block, add_special_tokens=False, return_offsets_mapping=True, split_special_tokens=True)
    except (NotImplementedError, TypeError, ValueError):  # slow tokenizers have no offsets
        return list(tokenizer(block, add_special_tokens=False)["input_ids"]), None
    inside = [k for k, (a, b) in enumerate(encoded["offset_mapping"]) if a >= char_start and b <= char_end and b > a]
    return list(encoded["input_ids"]), ((inside[0], inside[-1] + 1) if inside else None)
