"""A model that solves questions with tools through the rollout engine (no retrieval).

Used as the off-policy agent that fills a trace store from a model, and by ``rapo eval``.
"""

from __future__ import annotations

from pathlib import Path

from rapo_trl.core.rows import RolloutRow
from rapo_trl.rollout.backends import SamplingSettings, TransformersBackend
from rapo_trl.rollout.engine import HybridRolloutEngine, RolloutConfig


def tokenizer_kwargs(init_kwargs: dict) -> dict:
    """The part of a model's loading flags a tokenizer takes too (which revision, whether to run the hub's code)."""
    return {key: init_kwargs[key] for key in ("revision", "trust_remote_code") if key in init_kwargs}


def load_policy(path: str, device: str | None = None, dtype=None, quantization_config=None, **init_kwargs):
    """``(model, tokenizer)`` from a model folder, a PEFT adapter folder (its base loads first) or a hub id.

    The model is loaded straight onto ``device`` in ``dtype``; both default to the hardware rule of
    `rapo_trl.hardware` (the GPU in bf16/fp16 when there is one, else the CPU, in bf16 where it computes it natively); ``dtype="auto"`` takes
    the checkpoint's. ``quantization_config`` (k-bit loading) and ``init_kwargs`` (``from_pretrained``'s loading
    flags: ``revision``, ``attn_implementation``, ``trust_remote_code``, ...) are passed on; the tokenizer gets
    the revision and ``trust_remote_code`` too.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rapo_trl.hardware import placement

    place = placement(device, None if dtype == "auto" else dtype)
    # device_map puts the weights on the device as they load: no full copy in host memory first.
    kwargs = {"dtype": dtype if dtype == "auto" else place.dtype, "device_map": place.device, **init_kwargs}
    if quantization_config is not None:
        kwargs["quantization_config"] = quantization_config
    if (Path(path) / "adapter_config.json").exists():
        from peft import AutoPeftModelForCausalLM

        model = AutoPeftModelForCausalLM.from_pretrained(path, **kwargs)
    else:
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    tokenizer = AutoTokenizer.from_pretrained(path, **tokenizer_kwargs(init_kwargs))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.eval()
    return model, tokenizer


def render_prompt(tokenizer, prompt, chat_template_kwargs: dict | None = None) -> list[int]:
    """Token ids of a prompt: chat messages through the chat template (with ``chat_template_kwargs``, the extra
    template arguments RL renders its prompts with, e.g. ``enable_thinking``), a string with the special tokens the
    tokenizer adds (a BOS), as GRPOTrainer encodes a text prompt."""
    if isinstance(prompt, str):
        return tokenizer(prompt)["input_ids"]
    return list(tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=False,
                                              **(chat_template_kwargs or {})))


class RolloutAgent:
    """Runs tool-using rollouts for prompts, in batches.

    Args:
        model: a causal LM (PEFT or not).
        tokenizer: its tokenizer.
        tools: tag tools.
        config: budgets (retrieval settings are unused: the agent never retrieves).
        sampling: sampling settings (``do_sample=False`` for greedy evaluation).
        batch_size: rows generated together.
        engine: further `TransformersBackend` settings (``merged_weights``, ``head_kernel``, ...).
        chat_template_kwargs: extra chat template arguments for the prompts (``GRPOConfig.chat_template_kwargs``),
            so that the agent sees prompts in the format RL trains on.
    """

    def __init__(self, model, tokenizer, tools=(), config: RolloutConfig | None = None,
                 sampling: SamplingSettings | None = None, batch_size: int = 8, engine: dict | None = None,
                 chat_template_kwargs: dict | None = None):
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.chat_template_kwargs = chat_template_kwargs
        backend = TransformersBackend(model, tokenizer, sampling, **(engine or {}))
        self.engine = HybridRolloutEngine(tokenizer, backend, list(tools), None, config or RolloutConfig())

    @classmethod
    def from_pretrained(cls, path: str, tools=(), max_completion_length: int = 1024, max_turn_tokens: int = 512,
                        temperature: float = 1.0, do_sample: bool = True, batch_size: int = 8,
                        device: str | None = None, dtype=None, engine: dict | None = None,
                        chat_template_kwargs: dict | None = None) -> RolloutAgent:
        """An agent for the model at ``path`` on ``device`` in ``dtype`` (default: from the hardware); ``engine`` and
        ``chat_template_kwargs`` as the constructor takes them."""
        model, tokenizer = load_policy(path, device=device, dtype=dtype)
        config = RolloutConfig(max_completion_length=max_completion_length, max_turn_tokens=max_turn_tokens)
        return cls(model, tokenizer, tools, config, SamplingSettings(temperature=temperature, do_sample=do_sample),
                   batch_size, engine=engine, chat_template_kwargs=chat_template_kwargs)

    @property
    def tool_tags(self) -> list[str]:
        """The tags of the tools this agent calls: where the store cuts its trajectories into steps."""
        return list(self.engine.tools)

    def prompt_ids(self, prompt) -> list[int]:
        """``prompt`` rendered as this agent's rollouts begin from it (`render_prompt`)."""
        return render_prompt(self.tokenizer, prompt, self.chat_template_kwargs)

    def rollouts(self, prompts: list) -> list[RolloutRow]:
        rows: list[RolloutRow] = []
        for start in range(0, len(prompts), self.batch_size):
            batch = prompts[start : start + self.batch_size]
            rows.extend(self.engine.run([self.prompt_ids(p) for p in batch], retrieval_enabled=False))
        return rows

    def complete(self, prompts: list) -> list[str]:
        """One trajectory text per prompt (special tokens dropped)."""
        return [self.tokenizer.decode(r.completion_ids, skip_special_tokens=True) for r in self.rollouts(prompts)]

    def sample_trajectories(self, prompts: list, num_samples: int) -> list[list[str]]:
        """``num_samples`` trajectories per prompt (the trace-store builder's agent protocol)."""
        texts = self.complete([p for p in prompts for _ in range(num_samples)])
        return [texts[i * num_samples : (i + 1) * num_samples] for i in range(len(prompts))]
