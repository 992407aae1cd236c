"""Test doubles shared by the rollout, trainer and tool tests: a scripted-result tool, a fixed store, an engine
on the tiny model with scripted generation."""

from __future__ import annotations

from dataclasses import dataclass

from rapo_trl.rollout import HybridRolloutEngine, RolloutConfig, TransformersBackend
from rapo_trl.tools.base import ToolError
from tests.helpers.scripted import ScriptedGenerate


class EchoTool:
    tag = "python"
    timeout = 5.0

    def __init__(self):
        self.seen = []

    def run(self, text: str) -> str:
        self.seen.append(text)
        if "boom" in text:
            raise ToolError("boom happened")
        if "crash" in text:
            raise RuntimeError("tool bug")
        return f"out({text.strip()})"


class LookupTool:
    tag = "search"
    timeout = 5.0

    def run(self, text: str) -> str:
        return f"Doc 1: about {text.strip()}"


@dataclass
class Found:
    text: str
    is_fallback: bool = False
    record_id: str | None = "rec-1"
    reward: float | None = 1.0
    similarity: float | None = 0.9
    question_id: str | None = None


class FixedStore:
    def __init__(self, text="<think>a retrieved step</think>", fallback=False):
        self.text, self.fallback, self.queries = text, fallback, []

    def select(self, contexts):
        self.queries.append(list(contexts))
        return [Found(self.text, is_fallback=self.fallback) for _ in contexts]


def prompts_for(tokenizer, n):
    return [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": f"question number {i}"}], add_generation_prompt=True, tokenize=True,
            return_dict=False,
        )
        for i in range(n)
    ]


def make_engine(tiny_model, scripts_by_row, store=None, tools=None, **config):
    model, tokenizer = tiny_model
    prompts = prompts_for(tokenizer, len(scripts_by_row))
    scripted = ScriptedGenerate(
        tokenizer, {tuple(p): turns for p, turns in zip(prompts, scripts_by_row)}, model.config.vocab_size
    )
    model.generate = scripted
    defaults = dict(max_completion_length=256, max_turn_tokens=64, retrieve_prob=1.0)
    defaults.update(config)
    engine = HybridRolloutEngine(
        tokenizer, TransformersBackend(model, tokenizer), tools if tools is not None else [EchoTool(), LookupTool()],
        store, RolloutConfig(**defaults), seed=0,
    )
    return engine, prompts, tokenizer


def encode(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]
