"""The tag protocol shared by the rollout engine, the rewards and the scripted experts (docs/design.md).

One place for the texts the environment inserts, and for how a retrieved block is tokenized, so what the engine
writes is exactly what rewards strip and what the experts and the SFT warm start imitate.
"""

import re

TOOL_TAGS = ("python", "search")
"""Tags of the built-in tools."""

TOOL_CLOSE = re.compile(rf"</(?:{'|'.join(TOOL_TAGS)})>")
"""Closes a built-in tool's call: a step (``rapo_trl.store.steps.split_steps``) ends at one, with its result."""

RESULT_TEMPLATE = "\n<result>\n{output}\n</result>\n"
"""How a tool's output is shown to the policy (forced tokens), filled by ``result_block``."""

RETRIEVE_PREFACE = "Additional context is enclosed in <retrieve> </retrieve> tags. Use it if helpful."
"""The sentence that announces a retrieved step."""

RETRIEVE_TEMPLATE = "\n" + RETRIEVE_PREFACE + "\n<retrieve>\n{text}\n</retrieve>\n"
"""How a retrieved step (or the fallback text) is inserted (forced tokens)."""

OWN_STEP_TEMPLATE = "{text}\n"
"""How a stored step is inserted as the policy's own step (``retrieved_step_as_own``): no preface, no tags. A stored
step is the step and its ``<result>`` block, stripped; the newline is the one a tool result ends with
(``RESULT_TEMPLATE``), so the policy goes on where it would after a step it wrote itself."""

PLAN_CLOSE = "</think>"
"""Closes the policy's plan: the plan boundary, where ``retrieve_at: [plan]`` retrieves, comes right after it."""

ANSWER_OPEN = "<answer>"
"""Opens the final answer: a stored step holding it is a final-answer step."""

RESERVED_TAGS = frozenset({"think", "answer", "result", "retrieve"})
"""Tags the prompt format uses for other things; a tool named like one of them would be ambiguous."""

TAG_PATTERN = r"[A-Za-z][A-Za-z0-9_.-]*"
"""What a tool's tag may look like, so that ``<tag>...</tag>`` is a well-formed tag."""


def check_tool_tag(tag, where: str) -> str:
    """``tag`` when it can name a tool; a ValueError naming ``where`` it came from otherwise."""
    if not isinstance(tag, str) or not re.fullmatch(TAG_PATTERN, tag):
        raise ValueError(f"Invalid tool tag {tag!r} {where}: use a letter followed by letters, digits, '_', '-' "
                         "or '.', so that <tag>...</tag> is a well-formed tag.")
    if tag in RESERVED_TAGS:
        raise ValueError(f"Tool tag {tag!r} {where} is reserved by the prompt format "
                         f"({', '.join(sorted(RESERVED_TAGS))}).")
    return tag


def cap_text(text: str, limit: int | None) -> str:
    """``text`` cut to ``limit`` characters, keeping its head and tail (a tool's long output, before it is shown);
    ``None``: whole."""
    if limit is None or len(text) <= limit:
        return text
    head = limit // 2
    return f"{text[:head]}\n... [{len(text) - limit} characters cut] ...\n{text[-(limit - head):]}"


def result_block(output: str, template: str = RESULT_TEMPLATE, limit: int | None = None) -> str:
    """A tool's output as the policy is shown it: cut to ``limit`` characters (``cap_text``) and wrapped in
    ``template``. The template's closing tag inside the output (code printing ``</result>``) is written
    ``<\\/result>``: the rewards, the store's step splitter and the format check find a result's end by that tag, and
    the output's own copy would end the block early, leaving the rest to read as the policy's text."""
    closing = template.partition("{output}")[2].strip()
    text = cap_text(output, limit)
    if closing:
        text = text.replace(closing, f"{closing[0]}\\{closing[1:]}")
    return template.format(output=text)


def step_own_text(text: str, result_template: str = RESULT_TEMPLATE) -> str:
    """A stored step's own text: what its agent wrote, before the step's tool result block (all of it without one).

    The result block is the one the step ends with (``rapo_trl.store.steps.split_steps``), opened right after the
    call's closing tag. The agent's text may spell the opening tag itself (code printing it, reasoning that names it,
    a result it forged), so the block is not the first opening tag: it is the first one after every earlier closed
    block (a tool's output never closes one: ``result_block`` escapes its closing tag) that follows a closing tag.
    A step ending in a closed block whose opening follows no closing tag (a stop token that ran past the call's tag)
    ends at the first opening after the earlier blocks."""
    head, _, tail = result_template.partition("{output}")
    head, closing = head.strip(), tail.strip()
    if not head:
        return text
    body = text.rstrip()
    ends_closed = bool(closing) and body.endswith(closing)
    searched_from = 0
    if closing:
        earlier_close = body.rfind(closing, 0, len(body) - len(closing) if ends_closed else len(body))
        searched_from = earlier_close + len(closing) if earlier_close >= 0 else 0
    after_call = re.compile(rf"</{TAG_PATTERN}>\s*({re.escape(head)})").search(text, searched_from)
    if after_call is not None:
        return text[:after_call.start(1)]
    first = text.find(head, searched_from) if ends_closed else -1
    return text[:first] if first >= 0 else text


def encode_retrieved_block(tokenizer, text: str, retrieve_template: str = RETRIEVE_TEMPLATE,
                           result_template: str = RESULT_TEMPLATE) -> tuple[list[int], tuple[int, int] | None]:
    """The retrieved block's ids, and which of them (start, end) spell the stored step's own text: the part an agent
    wrote, without the preface, the ``<retrieve>`` tags or the step's tool result. Found from the tokenizer's
    character offsets of the one encoding of the block (the ids inserted are that encoding's); ``None`` when the
    tokenizer gives no offsets or no token lies wholly inside the step's text."""
    text = text.encode("utf-8", "replace").decode("utf-8")
    block = retrieve_template.format(text=text)
    head = retrieve_template.partition("{text}")[0].replace("{{", "{").replace("}}", "}")
    char_start = len(head)
    char_end = char_start + len(step_own_text(text, result_template))
    ids, offsets = encode_with_offsets(tokenizer, block)
    if offsets is None:
        return ids, None
    inside = [k for k, (a, b) in enumerate(offsets) if a >= char_start and b <= char_end and b > a]
    return ids, ((inside[0], inside[-1] + 1) if inside else None)


def encode_with_offsets(tokenizer, text: str) -> tuple[list[int], list[tuple[int, int]] | None]:
    """``text``'s ids, special tokens' text kept as text, and each id's character offsets (``None`` when the tokenizer
    gives none). A special token's text in a stored step (an end-of-turn marker) must never end the policy's turn or
    open a message of the template, with or without offsets."""
    try:
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, split_special_tokens=True)
    except (NotImplementedError, TypeError, ValueError):  # a tokenizer that refuses to give offsets
        encoded = tokenizer(text, add_special_tokens=False, split_special_tokens=True)
    # A Python-backend ("slow") tokenizer ignores return_offsets_mapping and answers without them.
    offsets = encoded.get("offset_mapping")
    return list(encoded["input_ids"]), (None if offsets is None else list(offsets))
