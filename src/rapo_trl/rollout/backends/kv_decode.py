"""A sampling loop over a causal LM's forward pass that keeps each row's KV cache between turns.

A hybrid rollout is many short turns: the policy samples a step, the engine appends forced tokens (a tool
result, a retrieved step) and asks for the next step. ``model.generate`` re-prefills the whole sequence
every turn and keeps decoding rows that have already stopped until the slowest row of the batch is done.
This loop instead

- keeps, per row, the keys and values of every token it has processed, and on the next call prefills only
  the tokens after the longest cached prefix of each sequence (usually the forced tokens just appended);
  a cache is used only where its token ids equal the new sequence's, so the ids stay exactly those given;
- prefills a prefix shared by rows without a cache (the system prompt) once, and identical rows (the G
  rollouts of one prompt) once;
- drops a row from the batch as soon as it has stopped (EOS, a stop string, or its own token budget).

The distribution sampled is ``generate``'s own: the logits processors come from transformers' ``_get_logits_processor``
for the same ``GenerationConfig`` (custom processors after the built-in ones, before temperature/top-k/
top-p), then softmax and a draw from it (``sampling.sample_tokens``: inverse-CDF, where ``generate`` runs
``torch.multinomial``), or argmax. Each row's random draws differ from a ``generate`` call on the same batch, not its
distribution.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from accelerate.utils import extract_model_from_parallel
from transformers import (
    DynamicCache,
    GenerationConfig,
    GenerationMixin,
    LogitsProcessorList,
    StoppingCriteria,
)
from transformers.cache_utils import DynamicLayer

from rapo_trl.internals import CACHE_ARGUMENTS, FORWARD_ARGUMENTS
from rapo_trl.rollout.backends.sampling import sample_tokens


def _is_transformers_generate(fn) -> bool:
    """Whether ``fn`` is transformers' own ``GenerationMixin.generate`` function (not a mock or a replacement)."""
    return (
        inspect.isfunction(fn)
        and getattr(fn, "__module__", None) == "transformers.generation.utils"
        and getattr(fn, "__qualname__", None) == "GenerationMixin.generate"
    )


_STOCK_GENERATE = GenerationMixin.__dict__.get("generate")
"""transformers' ``generate`` as it was when this module was imported, before any test or library could patch it
on the class (``patch("transformers.generation.utils.GenerationMixin.generate")``, as TRL's tests do)."""
if not _is_transformers_generate(_STOCK_GENERATE):  # already replaced at import: never treat it as stock
    _STOCK_GENERATE = None


def last_position(width: int, device) -> torch.Tensor:
    """``logits_to_keep`` for a forward over ``width`` positions that needs the last one's logits only.

    The int form (``1``) slices a strided view of the hidden states when a batch has more than one row and more
    than one position; ``F.linear`` then runs the LM head as a batched matmul over a copy of its weight for every
    row. On a CPU in bf16 that took 6.2 s for SmolLM2's head at 16 rows, against 16 ms on a contiguous copy of the
    same rows (pytorch/pytorch#151934). A 1-D index tensor (transformers' ``slice_logits_to_keep``) gathers those
    rows into one."""
    return torch.tensor([width - 1], device=device)


@dataclass(frozen=True)
class DecodeResult:
    """What one ``KVCacheDecoder.generate`` call sampled.

    ``token_ids[i]`` are row ``i``'s sampled ids. ``step_rows[s]`` holds the rows still sampling at step ``s``
    (the batch the logits processors saw then: it shrinks as rows stop), so a processor's per-step values can be
    put back on their rows (``_EntropyRecorder.table``).
    """

    token_ids: list[list[int]]
    step_rows: list[torch.Tensor]


@dataclass
class _Entry:
    """One row's processed tokens and their keys/values, one ``(heads, len, dim)`` pair per layer."""

    tokens: torch.Tensor  # (len,) long, on the CPU
    keys: list[torch.Tensor]
    values: list[torch.Tensor]


class _PreallocatedLayer(DynamicLayer):
    """A dynamic cache layer whose keys and values live in a buffer with room to grow.

    ``DynamicLayer.update`` appends by ``torch.cat``, copying the whole cache on every decoded token: a
    quarter of a decode step of SmolLM2-135M at batch 8 (profiled). Here a token is written in place and
    ``keys``/``values`` are views of the filled part; the buffer doubles when full. Values are the same.
    """

    @classmethod
    def adopt(cls, layer: DynamicLayer, room: int) -> None:
        """Turn ``layer`` (filled by a prefill) into a preallocated layer with space for ``room`` more tokens."""
        layer.__class__ = cls
        length = layer.keys.shape[-2]
        layer._length = length
        layer._key_buffer = layer._allocate(layer.keys, length + room)
        layer._value_buffer = layer._allocate(layer.values, length + room)
        layer._expose()

    @staticmethod
    def _allocate(filled: torch.Tensor, capacity: int) -> torch.Tensor:
        shape = list(filled.shape)
        shape[-2] = capacity
        buffer = filled.new_empty(shape)
        buffer[..., : filled.shape[-2], :] = filled
        return buffer

    def _expose(self) -> None:
        self.keys = self._key_buffer[..., : self._length, :]
        self.values = self._value_buffer[..., : self._length, :]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        end = self._length + key_states.shape[-2]
        if end > self._key_buffer.shape[-2]:
            self._key_buffer = self._allocate(self.keys, 2 * end)
            self._value_buffer = self._allocate(self.values, 2 * end)
        self._key_buffer[..., self._length : end, :] = key_states
        self._value_buffer[..., self._length : end, :] = value_states
        self._length = end
        self._expose()
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._key_buffer = self._key_buffer[indices, ...]
        self._value_buffer = self._value_buffer[indices, ...]
        self._expose()

    def crop(self, tokens_to_remove: int) -> None:  # not used by the loop; kept consistent with its buffer
        super().crop(tokens_to_remove)
        self._length = self.keys.shape[-2]


def unwrapped_model(model):
    """The transformers model (the one that owns the generation utilities and the config) under the wrappers a run
    puts around it: accelerate's for several processes (DistributedDataParallel, FSDP, DeepSpeed), then PEFT's.

    Public because the loss's shared-prompt forward (``trainer/shared_prompt.py``) unwraps the same way; it gets the
    model as the trainer's loss does, wrapped for several processes."""
    if hasattr(model, "module"):  # those wrappers hold the model there; the check costs ~2 ms, so only for them
        model = extract_model_from_parallel(model)
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def stock_generate(model) -> bool:
    """Whether ``model.generate`` is transformers' own, so the loop may stand in for it.

    A ``generate`` replaced anywhere must be the one that runs: on the instance (``model.generate = ...``), on
    the model's class or a base class between it and ``GenerationMixin``, or on ``GenerationMixin`` itself
    (``unittest.mock.patch("transformers.generation.utils.GenerationMixin.generate")``, as in TRL's
    ``test_train_with_mask_truncated_completions``). The last one leaves ``type(model).generate is
    GenerationMixin.generate`` true (both are the mock), so the class attribute is also compared with the function
    transformers defined, captured when this module was imported.
    """
    inner = unwrapped_model(model)
    if "generate" in vars(model) or "generate" in vars(inner):
        return False
    if not isinstance(inner, GenerationMixin):
        return False
    current = GenerationMixin.__dict__.get("generate")
    if _STOCK_GENERATE is None or current is not _STOCK_GENERATE or not _is_transformers_generate(current):
        return False
    return getattr(type(inner), "generate", None) is _STOCK_GENERATE


def cache_argument(model) -> str | None:
    """The name under which ``model``'s ``forward`` takes the KV cache (one of ``CACHE_ARGUMENTS``), or None."""
    parameters = inspect.signature(unwrapped_model(model).forward).parameters
    return next((name for name in CACHE_ARGUMENTS if name in parameters), None)


def prompt_learning_unavailable(model) -> str | None:
    """Why ``model``'s PEFT adapter rules out calling its forward again on a cache, in words, or None when it does not.

    A prompt-learning adapter (prompt tuning, prefix tuning, p-tuning) adds its virtual tokens, or replaces the cache
    passed with its own, on every forward: a second call over a cache sees the virtual tokens twice or loses the
    cached tokens. Only PEFT's own ``generate`` handles them."""
    wrapper = extract_model_from_parallel(model) if hasattr(model, "module") else model
    adapter = getattr(wrapper, "active_peft_config", None)
    if getattr(adapter, "is_prompt_learning", False):
        return f"the PEFT adapter ({adapter.peft_type}) adds virtual tokens or its own cache on every forward"
    return None


def kv_decode_unavailable(model) -> str | None:
    """Why the loop cannot stand in for ``model.generate``, in words, or None when it can.

    The loop needs a stock ``generate`` (not patched or wrapped on the instance, the model's class or
    ``GenerationMixin``; see ``stock_generate``), a decoder-only model whose ``forward`` takes the cache under a
    known name and the other arguments the loop passes, full-attention dynamic cache layers, the generation
    helpers it reuses, and no prompt-learning PEFT adapter (``prompt_learning_unavailable``).
    """
    inner = unwrapped_model(model)
    if not stock_generate(model):  # a patched generate must be the one used
        return "model.generate is patched or wrapped (on the model, its class or GenerationMixin), so it runs as is"
    reason = prompt_learning_unavailable(model)
    if reason is not None:
        return reason
    config = inner.config
    if getattr(config, "is_encoder_decoder", False):
        return "the model is an encoder-decoder"
    for name in ("_prepare_generation_config", "_get_logits_processor", "_prepare_special_tokens"):
        if not callable(getattr(inner, name, None)):
            return f"transformers' generation helper {name} is missing"
    parameters = inspect.signature(inner.forward).parameters
    if cache_argument(model) is None:
        return (f"{type(inner).__name__}.forward takes its KV cache under none of the names {list(CACHE_ARGUMENTS)} "
                f"(its parameters: {list(parameters)})")
    missing = [name for name in FORWARD_ARGUMENTS if name not in parameters]
    if missing:
        return f"{type(inner).__name__}.forward takes no {missing}"
    try:
        layers = DynamicCache(config=config).layers
    except Exception as error:  # a config the dynamic cache cannot describe
        return f"DynamicCache cannot be built from the model's config ({type(error).__name__}: {error})"
    if not layers:
        return "DynamicCache built from the model's config has no layers"
    other = sorted({type(layer).__name__ for layer in layers if type(layer) is not DynamicLayer})
    if other:
        return f"the model's cache has layers of type {other} (the loop handles full-attention DynamicLayer only)"
    return None


def supports_kv_decode(model) -> bool:
    """Whether the loop can stand in for ``model.generate`` (``kv_decode_unavailable`` says why not)."""
    return kv_decode_unavailable(model) is None


def _common_prefix(a: torch.Tensor, b: torch.Tensor) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = (a[:n] != b[:n]).nonzero()
    return int(diff[0]) if len(diff) else n


class KVCacheDecoder:
    """Samples turns for batches of token-id sequences, reusing the KV cache of the previous call.

    Reuse across calls is only safe while the weights stay the same: the caller opens it with
    ``keep(True)`` for one rollout and closes it with ``keep(False)`` (which also frees the memory).
    Prefix sharing within one call needs no such guarantee and is always on.

    Args:
        min_shared_prefix: the shortest common prefix of uncached rows that is prefilled once and shared.
        preallocate: decode into a cache buffer with room for the turn's budget (`_PreallocatedLayer`) rather
            than growing it by concatenation; the same values, without a copy of the cache per token.
    """

    def __init__(self, min_shared_prefix: int = 16, preallocate: bool = True):
        self.min_shared_prefix = min_shared_prefix
        self.preallocate = preallocate
        self._entries: list[_Entry] = []
        self._keep = False
        self.stats = {"prefilled_tokens": 0, "reused_tokens": 0, "decode_row_steps": 0}
        self._cache_argument = CACHE_ARGUMENTS[0]  # the installed forward's name, read at each generate

    def keep(self, enabled: bool) -> None:
        self._keep = enabled
        self._entries = []

    # ------------------------------------------------------------------ cache layout

    def _match(self, seq: torch.Tensor) -> tuple[_Entry | None, int]:
        """The stored entry sharing the longest prefix with ``seq`` (at most ``len(seq) - 1`` tokens:
        the last token must be fed to get the next-token logits)."""
        best, best_n = None, 0
        for entry in self._entries:
            n = min(_common_prefix(entry.tokens, seq), len(seq) - 1)
            if n > best_n:
                best, best_n = entry, n
        return best, best_n

    def _forward(self, model, parts: list[tuple[_Entry | None, int, torch.Tensor]], device):
        """One forward pass over rows ``(entry, cached, pending)``: the first ``cached`` tokens come from
        ``entry``'s cache, ``pending`` tokens are computed. Left-pads both parts (a row's cached and pending
        tokens may be separated by padding; the attention mask and position ids skip it).

        Returns ``(last_logits, cache, attention_mask, next_positions)``.
        """
        n_layers = None
        width_c = max(c for _, c, _ in parts)
        width_p = max(len(p) for _, _, p in parts)
        rows = len(parts)
        mask = torch.zeros((rows, width_c + width_p), dtype=torch.long)
        input_ids = torch.zeros((rows, width_p), dtype=torch.long)
        positions = torch.zeros((rows, width_p), dtype=torch.long)
        for r, (_, c, pending) in enumerate(parts):
            mask[r, width_c - c : width_c] = 1
            mask[r, width_c + width_p - len(pending) :] = 1
            input_ids[r, width_p - len(pending) :] = pending
            positions[r, width_p - len(pending) :] = torch.arange(c, c + len(pending))
        cache = None
        if width_c:
            some = next(e for e, c, _ in parts if c)
            n_layers = len(some.keys)
            data = []
            for layer in range(n_layers):
                k0, v0 = some.keys[layer], some.values[layer]
                keys = k0.new_zeros((rows, k0.shape[0], width_c, k0.shape[2]))
                values = v0.new_zeros((rows, v0.shape[0], width_c, v0.shape[2]))
                for r, (entry, c, _) in enumerate(parts):
                    if c:
                        keys[r, :, width_c - c :] = entry.keys[layer][:, :c]
                        values[r, :, width_c - c :] = entry.values[layer][:, :c]
                data.append((keys, values))
            cache = DynamicCache(ddp_cache_data=data)
        else:
            cache = DynamicCache()
        mask = mask.to(device)
        out = model(
            input_ids=input_ids.to(device), attention_mask=mask, position_ids=positions.to(device),
            use_cache=True, logits_to_keep=last_position(width_p, device), **{self._cache_argument: cache},
        )
        self.stats["prefilled_tokens"] += sum(len(p) for _, _, p in parts)
        self.stats["reused_tokens"] += sum(c for _, c, _ in parts)
        next_positions = torch.tensor([c + len(p) for _, c, p in parts], dtype=torch.long, device=device)
        return out.logits[:, -1].float(), cache, mask, next_positions  # a DynamicCache is filled in place

    @staticmethod
    def _extract(cache, row: int, mask_row: torch.Tensor, tokens: torch.Tensor) -> _Entry:
        valid = mask_row[: cache.get_seq_length()].nonzero().squeeze(1)
        if len(valid) != len(tokens):
            raise RuntimeError(f"KV cache bookkeeping: {len(valid)} cached positions for {len(tokens)} tokens.")
        keys = [layer.keys[row].index_select(1, valid) for layer in cache.layers]
        values = [layer.values[row].index_select(1, valid) for layer in cache.layers]
        return _Entry(tokens, keys, values)

    def _prefill(self, model, seqs: list[torch.Tensor], device):
        """Prefill every row; returns ``(logits, cache, mask, next_positions)`` in row order."""
        matched = [self._match(s) if self._keep else (None, 0) for s in seqs]
        # A prefix shared by the rows without a cache (e.g. the system prompt) is computed once.
        cold = [i for i, (_, c) in enumerate(matched) if c == 0]
        if len(cold) > 1:
            first = seqs[cold[0]]
            shared = min(len(seqs[i]) - 1 for i in cold)
            for i in cold[1:]:
                shared = min(shared, _common_prefix(first, seqs[i]))
            if shared >= self.min_shared_prefix:
                _, cache, mask, _ = self._forward(model, [(None, 0, first[:shared])], device)
                entry = self._extract(cache, 0, mask[0], first[:shared])
                for i in cold:
                    matched[i] = (entry, shared)
        # Identical rows (the G rollouts of one prompt) are prefilled once, then repeated.
        unique: dict[tuple, int] = {}
        parts, index = [], []
        for seq, (entry, c) in zip(seqs, matched):
            key = (id(entry), c, tuple(seq[c:].tolist()))
            if key not in unique:
                unique[key] = len(parts)
                parts.append((entry, c, seq[c:]))
            index.append(unique[key])
        logits, cache, mask, next_positions = self._forward(model, parts, device)
        if len(parts) != len(seqs) or index != list(range(len(seqs))):
            select = torch.tensor(index, device=device)
            for layer in cache.layers:
                layer.batch_select_indices(select)
            logits, mask, next_positions = logits[select], mask[select], next_positions[select]
        return logits, cache, mask, next_positions

    # ------------------------------------------------------------------ the loop

    @torch.no_grad()
    def generate(
        self,
        model,
        sequences: Sequence[Sequence[int]],
        max_new_tokens: Sequence[int],
        config: GenerationConfig,
        logits_processor: LogitsProcessorList,
        stopping: StoppingCriteria | None,
        eos_ids: set[int],
    ) -> DecodeResult:
        """Sample up to ``max_new_tokens[i]`` tokens for each row; a row stops after an EOS token or when
        ``stopping`` says so. Returns each row's sampled ids and, per step, the rows still sampling then.

        ``logits_processor`` holds the caller's custom processors (e.g. an entropy recorder); it is
        merged with the config's the way ``generate`` merges them.
        """
        inner = unwrapped_model(model)
        self._cache_argument = cache_argument(model)
        if self._cache_argument is None:
            raise ValueError(f"KVCacheDecoder: {kv_decode_unavailable(model)}")
        device = next(model.parameters()).device
        rows = len(sequences)
        seqs = [torch.tensor(list(s), dtype=torch.long) for s in sequences]
        width = max(len(s) for s in seqs)
        # As generate prepares it: options the config leaves unset come from the model's generation_config (a
        # checkpoint's no_repeat_ngram_size, suppress_tokens, min_p ...), and max_length counts the longest input.
        config, _ = inner._prepare_generation_config(config)
        if config.max_new_tokens is not None:
            config.max_length = config.max_new_tokens + width
        inner._prepare_special_tokens(config, True, device=device, batch_size=rows)
        processors = inner._get_logits_processor(
            generation_config=config, input_ids_seq_length=width, encoder_input_ids=None,
            prefix_allowed_tokens_fn=None, logits_processor=logits_processor, device=device, model_kwargs={},
        )
        # The sequences as processors see them in generate (left-padded, growing by the sampled ids).
        pad = config.pad_token_id if config.pad_token_id is not None else 0
        full_ids = torch.full((rows, width), pad, dtype=torch.long)
        for r, s in enumerate(seqs):
            full_ids[r, width - len(s) :] = s
        full_ids = full_ids.to(device)

        logits, cache, mask, positions = self._prefill(model, seqs, device)
        # The previous turn's entries were copied into this batch's cache: holding them through the decode would
        # keep a second copy of every row's keys and values (the largest part of a wide eval batch's memory).
        self._entries = []
        budgets = torch.tensor([max(0, int(n)) for n in max_new_tokens], dtype=torch.long)
        limit = int(budgets.max()) if rows else 0
        if self.preallocate:
            for layer in cache.layers:
                if type(layer) is DynamicLayer and layer.is_initialized:
                    _PreallocatedLayer.adopt(layer, room=limit)
        sampled = torch.full((rows, max(limit, 1)), pad, dtype=torch.long, device=device)
        counts = [0] * rows
        active = [r for r in range(rows) if budgets[r] > 0]
        if len(active) != rows:
            logits, full_ids, mask, positions = self._select(cache, active, logits, full_ids, mask, positions)
        eos = torch.tensor(sorted(eos_ids), dtype=torch.long, device=device) if eos_ids else None
        entries: dict[int, _Entry] = {}
        step = 0
        step_rows: list[torch.Tensor] = []
        while active:
            active_t = torch.tensor(active, device=device)
            step_rows.append(active_t)
            scores = processors(full_ids, logits)
            if config.do_sample:
                tokens = sample_tokens(torch.softmax(scores, dim=-1))
            else:
                tokens = torch.argmax(scores, dim=-1)
            sampled[active_t, step] = tokens
            full_ids = torch.cat([full_ids, tokens[:, None]], dim=-1)
            step += 1
            self.stats["decode_row_steps"] += len(active)
            stopped = torch.isin(tokens, eos) if eos is not None else torch.zeros_like(tokens, dtype=torch.bool)
            if stopping is not None:  # on the whole sequence, as in generate
                stopped |= stopping(full_ids, None).to(stopped.device)
            done = stopped.cpu() | (budgets[active] <= step)  # one device sync per step
            for r in active:
                counts[r] = step
            if bool(done.any()):
                finished = done.nonzero().squeeze(1).tolist()
                if self._keep:  # the last sampled token was never fed, so its keys are not in the cache
                    for a in finished:
                        r = active[a]
                        entries[r] = self._extract(
                            cache, a, mask[a], torch.cat([seqs[r], sampled[r, : step - 1].cpu()])
                        )
                keep = [a for a in range(len(active)) if not bool(done[a])]
                active = [active[a] for a in keep]
                if not active:
                    break
                tokens, full_ids, mask, positions = self._select(cache, keep, tokens, full_ids, mask, positions)
            mask = torch.cat([mask, mask.new_ones((len(active), 1))], dim=-1)
            out = model(
                input_ids=tokens[:, None], attention_mask=mask, position_ids=positions[:, None],
                use_cache=True, logits_to_keep=1, **{self._cache_argument: cache},
            )
            logits = out.logits[:, -1].float()
            positions = positions + 1
        self._entries = [entries[r] for r in sorted(entries)] if self._keep else []
        sampled = sampled.cpu()
        return DecodeResult([sampled[r, : counts[r]].tolist() for r in range(rows)], step_rows)

    @staticmethod
    def _select(cache, keep: list[int], *tensors):
        index = torch.tensor(keep, device=tensors[0].device)
        for layer in cache.layers:
            layer.batch_select_indices(index)
        return tuple(t[index] for t in tensors)
