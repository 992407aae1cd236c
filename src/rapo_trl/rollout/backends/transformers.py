"""Turn generation with transformers ``generate`` (CPU or any GPU)."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Sequence

import torch
from transformers import (
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    StoppingCriteriaList,
    StopStringCriteria,
)

from rapo_trl.rollout.backends.base import SamplingSettings, find_stop
from rapo_trl.rollout.entropy import token_entropies
from rapo_trl.rollout.types import TurnOutput


class _EntropyRecorder(LogitsProcessor):
    """Records each position's entropies as logits stream past; returns them unchanged.

    transformers applies custom processors before its temperature/top-k/top-p warpers, so this sees the
    policy's raw distribution, and nothing of size ``steps x batch x vocab`` is ever kept.
    """

    def __init__(self, top_k: int):
        self.top_k = top_k
        self.full: list[torch.Tensor] = []
        self.topk: list[torch.Tensor] = []

    def __call__(self, input_ids, scores):
        full, topk = token_entropies(scores, self.top_k)
        self.full.append(full.cpu())
        self.topk.append(topk.cpu())
        return scores


class TransformersBackend:
    """Generates a turn for all active rows in one left-padded ``generate`` call.

    Args:
        model: a causal LM, or a zero-argument callable returning a context manager that yields one
            (the trainer passes TRL's ``unwrap_model_for_generation`` so DeepSpeed/FSDP work).
        tokenizer: its tokenizer (stop-string detection decodes with it).
        sampling: sampling settings.
        generation_config: a base config to copy (e.g. the trainer's); sampling settings override it.
    """

    def __init__(
        self,
        model,
        tokenizer,
        sampling: SamplingSettings | None = None,
        generation_config: GenerationConfig | None = None,
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.sampling = sampling or SamplingSettings()
        self.base_config = generation_config
        if tokenizer.pad_token_id is None:
            raise ValueError("The tokenizer has no pad token; set tokenizer.pad_token (e.g. to its EOS token).")
        # transformers caches StopStringCriteria's vocab tables under a key built from `get_vocab()`, whose order
        # changes between calls for Rust-backed tokenizers, so its cache never hits and every `generate` call
        # rebuilt them (~0.5-2 s per turn for a 49k vocabulary). Build them once per set of stop strings here.
        self._stop_criteria: dict[tuple[str, ...], StopStringCriteria] = {}

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
            stop_strings=None,  # passed as a prebuilt StopStringCriteria (see _stopping_criteria)
        )
        config.max_length = None
        config.min_new_tokens = None
        config.min_length = 0
        return config

    def _stopping_criteria(self, stop_strings: Sequence[str]) -> StoppingCriteriaList | None:
        key = tuple(stop_strings)
        if not key:
            return None
        if key not in self._stop_criteria:
            self._stop_criteria[key] = StopStringCriteria(self.tokenizer, list(key))
        return StoppingCriteriaList([self._stop_criteria[key]])

    @torch.no_grad()
    def generate(
        self, sequences: Sequence[Sequence[int]], max_new_tokens: Sequence[int], stop_strings: Sequence[str]
    ) -> list[TurnOutput]:
        if not sequences:
            return []
        with self._model_context()() as model:
            device = next(model.parameters()).device
            width = max(len(s) for s in sequences)
            pad = self.tokenizer.pad_token_id
            input_ids = torch.full((len(sequences), width), pad, dtype=torch.long)
            attention_mask = torch.zeros((len(sequences), width), dtype=torch.long)
            for row, seq in enumerate(sequences):
                input_ids[row, width - len(seq) :] = torch.tensor(list(seq), dtype=torch.long)
                attention_mask[row, width - len(seq) :] = 1
            recorder = _EntropyRecorder(self.sampling.entropy_top_k)
            config = self._generation_config(model, max(max_new_tokens), stop_strings)
            was_training = model.training
            model.eval()
            try:
                out = model.generate(
                    input_ids=input_ids.to(device),
                    attention_mask=attention_mask.to(device),
                    generation_config=config,
                    logits_processor=LogitsProcessorList([recorder]),
                    stopping_criteria=self._stopping_criteria(stop_strings),
                    tokenizer=self.tokenizer,
                )
            finally:
                model.train(was_training)
            eos_ids = self.eos_token_ids(model)
        new_tokens = out.sequences[:, width:].cpu()
        full = torch.stack(recorder.full, dim=1) if recorder.full else torch.zeros((len(sequences), 0))
        topk = torch.stack(recorder.topk, dim=1) if recorder.topk else torch.zeros((len(sequences), 0))
        results = []
        for row, limit in enumerate(max_new_tokens):
            ids = new_tokens[row, :limit].tolist()
            length, finish, stop = find_stop(self.tokenizer, ids, stop_strings, eos_ids)
            results.append(
                TurnOutput(
                    token_ids=ids[:length],
                    finish=finish,
                    stop_string=stop,
                    logprobs=None,
                    entropy_full=full[row, :length].tolist(),
                    entropy_topk=topk[row, :length].tolist(),
                )
            )
        return results
