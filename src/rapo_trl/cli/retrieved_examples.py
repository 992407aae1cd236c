"""Warm-start examples that carry a retrieved step, so the policy learns to go on after a ``<retrieve>`` block.

A warm start that has imitated whole trajectories only has never seen a retrieved block, and after one it answers at
once: shown a stored first step at the plan boundary, it boxes that step's printed intermediate number instead of
making its next call (``benchmarks/results/learning_regime_notes.md``). Here a share of the demonstrated questions
get a second example in which one step of the question's own stored trajectory arrives as a retrieved block, at a
boundary where RL may retrieve (after a tool step, or after the first plan: both, whatever a recipe's ``retrieve_at``,
so one warm start serves every arm of a comparison), and the trajectory goes on with the steps after it: the policy
imitates the steps it must still write, never the block. The example is built from token ids the way a hybrid
rollout is: the prompt as the chat template renders it for generation, the block as the rollout engine encodes it
(`rapo_trl.protocol.encode_retrieved_block`), excluded from the loss like every forced token.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from rapo_trl.protocol import PLAN_CLOSE, TOOL_TAGS, encode_retrieved_block
from rapo_trl.store.sft_examples import STEP_SEPARATOR
from rapo_trl.store.steps import tool_close

IGNORED = -100
"""The label of a token the SFT loss leaves out (the prompt, a retrieved block)."""


@dataclass(frozen=True)
class RetrievedSplice:
    """A trajectory cut where a retrieval comes: the policy's text, the stored step shown, the policy's text after."""

    before: str
    """What the policy wrote before the retrieval (its plan, or its steps up to a tool step)."""
    step: str
    """The stored step the block shows: the step the trajectory takes next, with its tool result."""
    after: str
    """The trajectory's steps after that one: what the policy still has to write."""


def retrieval_splices(steps: list[str], tool_tags=TOOL_TAGS) -> list[RetrievedSplice]:
    """Each place in a trajectory (its stored steps, in order) where RL could retrieve a step that is not the
    trajectory's last (a retrieval must leave the policy a step of its own): after its first plan, when a tool call
    follows the plan, and after each tool step. ``tool_tags``: the tools whose calls end a step, as the store cut
    the trajectory (a tool of the user's own included: the rollout retrieves after its steps too)."""
    closing = tool_close(tool_tags)

    def is_tool_step(step: str) -> bool:
        return closing.search(step) is not None

    splices = []
    plan_end = steps[0].find(PLAN_CLOSE) if steps else -1
    if len(steps) > 1 and plan_end >= 0 and is_tool_step(steps[0]):
        cut = plan_end + len(PLAN_CLOSE)
        splices.append(RetrievedSplice(steps[0][:cut], steps[0], STEP_SEPARATOR.join(steps[1:])))
    splices += [
        RetrievedSplice(STEP_SEPARATOR.join(steps[:k]), steps[k], STEP_SEPARATOR.join(steps[k + 1:]))
        for k in range(1, len(steps) - 1)
        if is_tool_step(steps[k - 1])
    ]
    return splices


class ExampleTokenizer:
    """Token ids and labels of warm-start examples, each ``prompt + completion`` as a hybrid rollout holds it; the
    chat template renders with ``chat_template_kwargs``, the extra arguments RL renders its prompts with."""

    def __init__(self, tokenizer, chat_template_kwargs: dict | None = None):
        self.tokenizer = tokenizer
        self.template_kwargs = dict(chat_template_kwargs or {})

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []

    def _prompt_ids(self, prompt) -> list[int]:
        return list(self.tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True,
                                                       return_dict=True, **self.template_kwargs)["input_ids"])

    def _turn_end(self, prompt) -> list[int]:
        """What the chat template writes after an assistant message's content (an end-of-turn marker)."""
        marker = "\x00assistant content\x00"
        rendered = self.tokenizer.apply_chat_template([*prompt, {"role": "assistant", "content": marker}],
                                                      tokenize=False, **self.template_kwargs)
        return self._encode(rendered.split(marker, 1)[1])

    def example(self, prompt, completion: str | RetrievedSplice) -> dict:
        """``input_ids`` and ``labels`` (the prompt and any retrieved block at ``IGNORED``)."""
        prompt_ids = self._prompt_ids(prompt)
        if isinstance(completion, RetrievedSplice):
            block, _ = encode_retrieved_block(self.tokenizer, completion.step)
            before, after = self._encode(completion.before), self._encode(completion.after)
            ids = [*before, *block, *after]
            learned = [*before, *[IGNORED] * len(block), *after]
        else:
            ids = learned = self._encode(completion)
        end = self._turn_end(prompt)
        return {"input_ids": [*prompt_ids, *ids, *end], "labels": [*[IGNORED] * len(prompt_ids), *learned, *end]}


def with_retrieved_examples(questions: list[tuple[object, list[str]]], tokenizer, share: float,
                            seed: int, tool_tags=TOOL_TAGS, chat_template_kwargs: dict | None = None) -> list[dict]:
    """Tokenized SFT examples: each ``(prompt, steps)`` whole, and for a ``share`` of them (drawn with ``seed``)
    one more with a step retrieved at one of the trajectory's boundaries (drawn among them; ``tool_tags`` as
    ``retrieval_splices`` takes them); rendered with ``chat_template_kwargs`` (`ExampleTokenizer`)."""
    rng = random.Random(seed)
    encode = ExampleTokenizer(tokenizer, chat_template_kwargs)
    examples = []
    for prompt, steps in questions:
        examples.append(encode.example(prompt, STEP_SEPARATOR.join(steps)))
        splices = retrieval_splices(steps, tool_tags)
        if splices and rng.random() < share:
            examples.append(encode.example(prompt, rng.choice(splices)))
    return examples
