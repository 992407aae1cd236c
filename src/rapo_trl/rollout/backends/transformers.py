"""Turn generation with transformers (CPU or any GPU): a KV-cached sampling loop, or ``generate``."""

from __future__ import annotations

import contextlib
import copy
import logging
import weakref
from collections.abc import Callable, Mapping, Sequence

import torch
from transformers import (
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    StoppingCriteriaList,
    StopStringCriteria,
)

from rapo_trl.rollout.backends.base import SamplingSettings, find_stop
from rapo_trl.rollout.backends.decode_model import DecodeModel
from rapo_trl.rollout.backends.kv_decode import KVCacheDecoder, kv_decode_unavailable
from rapo_trl.rollout.entropy import token_entropies
from rapo_trl.rollout.types import TurnOutput

# transformers caches StopStringCriteria's vocab tables under a key built from `get_vocab()`, whose order changes
# between calls for Rust-backed tokenizers, so its cache never hits and every `generate` call rebuilt them
# (~0.5-2 s for a 49k vocabulary). Built here once per tokenizer and set of stop strings, shared by backends.
_STOP_CRITERIA: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

logger = logging.getLogger(__name__)


def decode_attention(device: torch.device, avoid_cudnn: bool) -> contextlib.AbstractContextManager:
    """On CUDA with ``avoid_cudnn``, scaled-dot-product attention without its cuDNN backend while decoding.

    Decoding calls attention with a new key length every step, one short call per layer, so a per-call host cost
    dominates, and cuDNN's attention has a large one (benchmarks/results/measurements_notes.md); the
    memory-efficient and flash kernels take the same masks.
    """
    if device.type != "cuda" or not avoid_cudnn:
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


class _EntropyRecorder(LogitsProcessor):
    """Records each position's entropies as logits stream past; returns them unchanged.

    transformers applies custom processors before its temperature/top-k/top-p warpers, so this sees the
    policy's raw distribution, and nothing of size ``steps x batch x vocab`` is ever kept. The per-step
    values stay on the model's device and move to the CPU once per turn (``table``), not once per token.
    """

    def __init__(self, top_k: int):
        self.top_k = top_k
        self.full: list[torch.Tensor] = []
        self.topk: list[torch.Tensor] = []

    def __call__(self, input_ids, scores):
        full, topk = token_entropies(scores, self.top_k)
        self.full.append(full)
        self.topk.append(topk)
        return scores

    def table(self, rows: int, step_rows: Sequence[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(full, topk)`` as CPU tensors of shape ``(rows, steps recorded)``.

        ``step_rows[s]`` names the rows that step ``s`` saw when the batch shrinks as rows stop (the cached
        loop); without it every step saw all rows (``generate``). A ``generate`` that never called the
        processors (a patched one) leaves zero columns: no entropies, rather than made-up ones.
        """
        if not self.full:
            empty = torch.zeros((rows, 0))
            return empty, empty
        if step_rows is None:
            return torch.stack(self.full, dim=1).cpu(), torch.stack(self.topk, dim=1).cpu()
        full = self.full[0].new_zeros((rows, len(self.full)))
        topk = self.topk[0].new_zeros((rows, len(self.topk)))
        for step, (idx, f, t) in enumerate(zip(step_rows, self.full, self.topk)):
            full[idx, step] = f
            topk[idx, step] = t
        return full.cpu(), topk.cpu()


class TransformersBackend:
    """Generates a turn for all active rows with transformers (CPU or any GPU).

    By default turns run in ``KVCacheDecoder`` (``kv_decode.py``): a sampling loop over the model's forward
    pass with ``generate``'s logits processors, which keeps each row's KV cache from one turn to the next
    (between ``begin_rollout`` and ``end_rollout``, which the engine calls around each rollout), prefills a
    shared prompt prefix and identical rows once, and drops rows from the batch as they stop. Models it
    cannot serve (sliding-window or other non-dynamic cache layers, encoder-decoders), or ``reuse_kv=False``,
    get one left-padded ``model.generate`` call per turn. So does a patched or wrapped ``generate``, wherever it
    was replaced: on the model, its class, or ``GenerationMixin`` itself (``kv_decode.stock_generate``), so a
    mocked ``generate`` (TRL's tests) is the one that runs and its rows are read like any other turn's: the ids
    after the left-padded input, cut at each row's budget, EOS or stop string (``find_stop``). ``last_path``
    says which path the last turn took.

    Args:
        model: a causal LM, or a zero-argument callable returning a context manager that yields one
            (the trainer passes TRL's ``unwrap_model_for_generation`` so DeepSpeed/FSDP work).
        tokenizer: its tokenizer (stop-string detection decodes with it).
        sampling: sampling settings.
        generation_config: a base config to copy (e.g. the trainer's); sampling settings override it.
        reuse_kv: use the cached sampling loop where the model allows it.
        logits_processor: extra processors (e.g. constraints), run after the generation config's own and
            before the entropy recorder, so recorded entropies are of the distribution they leave.
        avoid_cudnn_attention: on CUDA, decode with SDPA's flash / memory-efficient kernels rather than cuDNN's,
            whose per-call host cost dominated short decode steps (``decode_attention``).
        merged_weights: in the KV-cache loop, decode a PEFT model on its LoRA adapter folded into a copy of the
            adapted weights, folded again whenever the adapter changed (``decode_model.DecodeModel``); off by
            default. ``generate`` (the fallback path) always runs through the adapter.
        head_kernel: the LM head's matmul in the KV-cache loop (``decode_model.HEAD_KERNELS``).
    """

    def __init__(
        self,
        model,
        tokenizer,
        sampling: SamplingSettings | None = None,
        generation_config: GenerationConfig | None = None,
        reuse_kv: bool = True,
        logits_processor: LogitsProcessorList | None = None,
        avoid_cudnn_attention: bool = True,
        merged_weights: bool = False,
        head_kernel: str = "linear",
    ):
        self.model = model
        self.avoid_cudnn_attention = avoid_cudnn_attention
        self.tokenizer = tokenizer
        self.sampling = sampling or SamplingSettings()
        self.base_config = generation_config
        if tokenizer.pad_token_id is None:
            raise ValueError("The tokenizer has no pad token; set tokenizer.pad_token (e.g. to its EOS token).")
        self.decoder = KVCacheDecoder() if reuse_kv else None
        self.decode_model = DecodeModel(merged_weights, head_kernel) if reuse_kv else None
        """Builds the module the KV-cache loop runs (its ``weights`` says what the last turn decoded on)."""
        self.extra_processors = list(logits_processor or [])
        self.last_path: str | None = None
        """``"kv_cache"`` or ``"generate"``: which path the last turn took."""
        self.kv_cache_unavailable: str | None = None
        """Why the last turn could not take the KV-cache loop (``reuse_kv=True`` only), or None."""
        self._reported: set[str] = set()

    def begin_rollout(self) -> None:
        """Keep KV caches from turn to turn until ``end_rollout`` (the weights must not change meanwhile)."""
        if self.decoder is not None:
            self.decoder.keep(True)

    def end_rollout(self) -> None:
        """Drop the KV caches kept since ``begin_rollout``."""
        if self.decoder is not None:
            self.decoder.keep(False)

    def _model_context(self) -> Callable[[], contextlib.AbstractContextManager]:
        if isinstance(self.model, torch.nn.Module):
            return lambda: contextlib.nullcontext(self.model)
        return self.model

    def eos_token_ids(self, model) -> set[int]:
        ids = set()
        for source in (getattr(model, "generation_config", None), self.base_config):
            eos = getattr(source, "eos_token_id", None) if source is not None else None
            if eos is not None:
                ids.update([eos] if isinstance(eos, int) else eos)
        if self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        return ids

    def _generation_config(self, model, max_new_tokens: int, stop_strings: Sequence[str]) -> GenerationConfig:
        config = copy.deepcopy(self.base_config or model.generation_config)
        s = self.sampling
        config.update(**s.extra)
        config.update(
            max_new_tokens=max_new_tokens,
            do_sample=s.do_sample,
            temperature=s.temperature if s.do_sample else None,
            top_p=s.top_p if s.do_sample else None,
            top_k=s.top_k if s.do_sample else None,  # 0 disables top-k (HF would default to 50)
            min_p=s.min_p if s.do_sample else None,
            repetition_penalty=s.repetition_penalty,
            pad_token_id=self.tokenizer.pad_token_id,
            return_dict_in_generate=True,
            output_scores=False,
            output_logits=False,
            stop_strings=None,  # passed as a prebuilt StopStringCriteria (see _stop_criterion)
        )
        config.max_length = None
        config.min_new_tokens = None
        config.min_length = 0
        return config

    def _stop_criterion(self, stop_strings: Sequence[str]) -> StopStringCriteria | None:
        key = tuple(stop_strings)
        if not key:
            return None
        built = _STOP_CRITERIA.setdefault(self.tokenizer, {})
        if key not in built:
            built[key] = StopStringCriteria(self.tokenizer, list(key))
        return built[key]

    def _processors(self, recorder: _EntropyRecorder) -> LogitsProcessorList:
        return LogitsProcessorList([*self.extra_processors, recorder])

    def _use_kv_cache(self, model, config: GenerationConfig) -> bool:
        if self.decoder is None:
            return False
        if (config.num_beams or 1) != 1 or getattr(config, "assistant_model", None) is not None:
            reason = "the generation config asks for beam search or assisted decoding"
        else:
            reason = kv_decode_unavailable(model)
        self.kv_cache_unavailable = reason
        if reason is not None and reason not in self._reported:  # once per cause, on the first turn it applies
            self._reported.add(reason)
            logger.warning("RAPO: rollout turns run model.generate (the whole sequence prefilled again every turn, "
                           "stopped rows decoded to the end) instead of the KV-cache loop, because %s.", reason)
        return reason is None

    @torch.no_grad()
    def generate(
        self, sequences: Sequence[Sequence[int]], max_new_tokens: Sequence[int], stop_strings: Sequence[str]
    ) -> list[TurnOutput]:
        if not sequences:
            return []
        with self._model_context()() as model:
            recorder = _EntropyRecorder(self.sampling.entropy_top_k)
            config = self._generation_config(model, max(max_new_tokens), stop_strings)
            eos_ids = self.eos_token_ids(model)
            stop = self._stop_criterion(stop_strings)
            was_training = model.training
            model.eval()
            with decode_attention(next(model.parameters()).device, self.avoid_cudnn_attention):
                try:
                    if self._use_kv_cache(model, config):
                        self.last_path = "kv_cache"
                        decoding = self.decode_model.model_for(model)
                        decoded = self.decoder.generate(
                            decoding, sequences, max_new_tokens, config, self._processors(recorder), stop, eos_ids
                        )
                        new_ids = decoded.token_ids
                        full, topk = recorder.table(len(sequences), decoded.step_rows)
                    else:
                        self.last_path = "generate"
                        new_ids = self._generate_padded(model, sequences, max_new_tokens, config, recorder, stop)
                        full, topk = recorder.table(len(sequences))
                finally:
                    model.train(was_training)
        results = []
        for row, ids in enumerate(new_ids):
            length, finish, stop_string = find_stop(self.tokenizer, ids, stop_strings, eos_ids)
            results.append(
                TurnOutput(
                    token_ids=ids[:length],
                    finish=finish,
                    stop_string=stop_string,
                    logprobs=None,
                    entropy_full=full[row, :length].tolist(),
                    entropy_topk=topk[row, :length].tolist(),
                )
            )
        return results

    def _generate_padded(self, model, sequences, max_new_tokens, config, recorder, stop) -> list[list[int]]:
        """One left-padded ``model.generate`` call; each row's sampled ids cut to its own budget."""
        device = next(model.parameters()).device
        width = max(len(s) for s in sequences)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.full((len(sequences), width), pad, dtype=torch.long)
        attention_mask = torch.zeros((len(sequences), width), dtype=torch.long)
        for row, seq in enumerate(sequences):
            input_ids[row, width - len(seq) :] = torch.tensor(list(seq), dtype=torch.long)
            attention_mask[row, width - len(seq) :] = 1
        out = model.generate(
            input_ids=input_ids.to(device),
            attention_mask=attention_mask.to(device),
            generation_config=config,
            logits_processor=self._processors(recorder),
            stopping_criteria=StoppingCriteriaList([stop]) if stop is not None else None,
            tokenizer=self.tokenizer,
        )
        # A wrapped or patched generate may return the bare tensor of sequences instead of an output object.
        if isinstance(out, torch.Tensor):
            sequences_out = out
        elif isinstance(out, Mapping):
            sequences_out = out["sequences"]
        else:
            sequences_out = out.sequences
        new_tokens = sequences_out[:, width:].cpu()
        return [new_tokens[row, :limit].tolist() for row, limit in enumerate(max_new_tokens)]
