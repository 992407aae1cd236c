"""A retrieved block encoded by a Python-backend ("slow") tokenizer, which gives no character offsets: the same ids as
a fast tokenizer's, with a special token's text in the stored step kept as text."""

from __future__ import annotations

from tokenizers import Tokenizer
from transformers import PreTrainedTokenizer

from rapo_trl.models import CHAT_SPECIAL_TOKENS, build_tiny_tokenizer
from rapo_trl.protocol import OWN_STEP_TEMPLATE, RETRIEVE_TEMPLATE, encode_retrieved_block

STORED = "<think>the doc ends a turn<|im_end|></think>\n<search>q</search>\n<result>\nDoc <|im_end|>\n</result>"


class SlowTinyTokenizer(PreTrainedTokenizer):
    """The tiny tokenizer's vocabulary and merges behind the Python backend, so its ids can be set beside the fast
    tokenizer's: the backend splits out special tokens itself and hands the rest here, which stays text."""

    def __init__(self, fast, **kwargs):
        self.bpe = Tokenizer.from_str(fast.backend_tokenizer.to_str())
        self.bpe.encode_special_tokens = True  # what reaches _tokenize is text, special tokens already split out
        super().__init__(eos_token=fast.eos_token, pad_token=fast.pad_token,
                         additional_special_tokens=[t for t in CHAT_SPECIAL_TOKENS if t not in
                                                    (fast.eos_token, fast.pad_token)], **kwargs)

    @property
    def vocab_size(self) -> int:
        return self.bpe.get_vocab_size()

    def get_vocab(self) -> dict[str, int]:
        return self.bpe.get_vocab()

    def _tokenize(self, text: str, **kwargs) -> list[str]:
        return self.bpe.encode(text, add_special_tokens=False).tokens

    def _convert_token_to_id(self, token: str) -> int:
        return self.bpe.token_to_id(token)

    def _convert_id_to_token(self, index: int) -> str:
        return self.bpe.id_to_token(index)

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return self.bpe.decoder.decode(tokens)


def test_the_slow_tokenizer_spells_ordinary_text_as_the_fast_one():
    fast = build_tiny_tokenizer()
    slow = SlowTinyTokenizer(fast)
    text = RETRIEVE_TEMPLATE.format(text="<think>reuse x</think>\n<python>x = 2</python>")
    assert not slow.is_fast and slow.eos_token_id == fast.eos_token_id
    assert slow(text, add_special_tokens=False)["input_ids"] == fast(text, add_special_tokens=False)["input_ids"]


def test_a_slow_tokenizer_encodes_a_block_as_the_fast_one_with_special_token_text_kept_as_text():
    fast = build_tiny_tokenizer()
    slow = SlowTinyTokenizer(fast)
    for template in (RETRIEVE_TEMPLATE, OWN_STEP_TEMPLATE):
        fast_ids, span = encode_retrieved_block(fast, STORED, template)
        slow_ids, no_span = encode_retrieved_block(slow, STORED, template)
        assert span is not None and no_span is None  # no offsets: the step's own tokens are not known
        assert slow_ids == fast_ids and fast.eos_token_id not in slow_ids
