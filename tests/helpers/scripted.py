"""Scripted generation for deterministic rollout tests.

``ScriptedGenerate`` replaces ``model.generate``: each row (identified by its prompt) emits the next of
its scripted turns, and the logits processors see a known distribution at every step (uniform over
``support`` tokens), so step entropies have exact expected values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace

import torch


@dataclass
class Turn:
    text: str
    support: int = 2  # the policy's distribution at each step: uniform over this many tokens


def uniform_entropies(support: int, vocab: int, top_k: int = 10) -> tuple[float, float]:
    """(full, topk) entropies of a uniform distribution over ``support`` of ``vocab`` tokens."""
    full = math.log(support)
    topk = min(support, top_k) * (1 / support) * math.log(support) / math.log(vocab)
    return full, topk


class ScriptedGenerate:
    """Rows are matched to scripts by the sequence they have built so far (rows sharing a prompt are
    assigned in order on the first call), so groups of identical prompts can follow different scripts."""

    def __init__(self, tokenizer, scripts, vocab_size: int):
        self.tokenizer = tokenizer
        if isinstance(scripts, dict):
            scripts = [(list(key), turns) for key, turns in scripts.items()]
        # each entry: [sequence known so far, remaining turns]
        self.states = [[list(prefix), list(turns)] for prefix, turns in scripts]
        self.vocab_size = vocab_size
        self.calls = 0

    def _match(self, ids: list[int], taken: set[int]) -> int:
        """The unused script whose known sequence shares the longest common prefix with ``ids``."""
        if len(self.states) == 1:
            return 0

        def common(known):
            n = 0
            for a, b in zip(known, ids):
                if a != b:
                    break
                n += 1
            return n

        candidates = [(common(known), -i) for i, (known, _) in enumerate(self.states) if i not in taken]
        # A script that has already gone past ``ids`` (its sequence is not a prefix of them) belongs to another row,
        # e.g. one rolled out in an earlier engine call of the same step.
        own = [(n, i) for n, i in candidates if n == len(self.states[-i][0])]
        return -max(own or candidates)[1]

    def __call__(self, input_ids, attention_mask, generation_config, logits_processor=None, **kwargs):
        self.calls += 1
        pad = generation_config.pad_token_id
        outputs, supports, taken = [], [], set()
        for row in range(input_ids.size(0)):
            ids = input_ids[row][attention_mask[row].bool()].tolist()
            index = self._match(ids, taken)
            taken.add(index)
            state = self.states[index]
            turn = state[1].pop(0) if state[1] else Turn(self.tokenizer.eos_token)
            new = self.tokenizer(turn.text, add_special_tokens=False)["input_ids"][: generation_config.max_new_tokens]
            state[0] = ids + new
            outputs.append(new)
            supports.append(turn.support)
        width = max(len(o) for o in outputs)
        for _ in range(width):
            logits = torch.full((len(outputs), self.vocab_size), -math.inf)
            for row, support in enumerate(supports):
                logits[row, :support] = 0.0
            for processor in logits_processor or []:
                processor(input_ids, logits)
        new_tokens = torch.full((len(outputs), width), pad, dtype=torch.long)
        for row, ids in enumerate(outputs):
            new_tokens[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        return SimpleNamespace(sequences=torch.cat([input_ids, new_tokens], dim=1))
