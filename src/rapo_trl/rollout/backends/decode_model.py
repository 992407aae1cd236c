"""The model the KV-cache loop decodes with: the LoRA adapter folded into a copy of the adapted weights, and the
LM head on a chosen matmul kernel.

Through a PEFT adapter every adapted linear layer runs three products per token (the frozen weight, then A and B)
plus casts and an add; a CPU decode step of SmolLM2-135M with the adapter took 352 ms against 292 ms without
(benchmarks/results/step_notes.md). TRL folds the adapter into vLLM's weights for the same reason. Here the folded
weights live in a module tree that shares every other tensor with the policy (embeddings, norms, LM head, the
adapter's own parameters), so the extra memory is one copy of the adapted layers' weights at their own dtype.

The copy is refreshed only when the adapter changed since the last fold: every in-place update of a tensor
(an optimizer step, ``load_state_dict``) bumps torch's per-tensor version counter, and the key of a fold is those
counters and the storages of the adapter and the frozen weights, with the active adapters.
"""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import dataclass

import torch
from torch import nn

HEAD_KERNELS = ("linear", "weight_matmul")
"""``linear``: ``F.linear`` (what ``nn.Linear`` runs); ``weight_matmul``: ``W @ h.T`` transposed back, which MKL ran
at 23 ms against 52 ms for ``F.linear`` on SmolLM2's 49152 x 576 head at 16 rows in fp32 (step_notes.md)."""

logger = logging.getLogger(__name__)


def head_logits(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, kernel: str) -> torch.Tensor:
    """``hidden @ weight.T + bias`` for ``hidden`` of shape ``(..., d)``, by ``kernel`` (one of ``HEAD_KERNELS``).

    The kernels give the same values up to float summation order."""
    if kernel == "linear":
        return nn.functional.linear(hidden, weight, bias)
    if kernel != "weight_matmul":
        raise ValueError(f"unknown LM head kernel {kernel!r}; one of {HEAD_KERNELS}")
    flat = hidden.reshape(-1, hidden.shape[-1])
    logits = (weight @ flat.T).T  # the vocabulary-major product; a transposed view, not a copy
    if bias is not None:
        logits = logits + bias
    return logits.reshape(*hidden.shape[:-1], weight.shape[0])


class _Head(nn.Linear):
    """An ``nn.Linear`` over the LM head's own weight (shared, not copied) that runs ``head_logits``."""

    def __init__(self, head: nn.Linear, kernel: str):
        nn.Module.__init__(self)
        self.in_features, self.out_features, self.kernel = head.in_features, head.out_features, kernel
        self.weight, self.bias = head.weight, head.bias

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return head_logits(hidden, self.weight, self.bias, self.kernel)


def _lora_linear_type():
    try:
        from peft.tuners.lora.layer import Linear
    except ImportError:
        return None
    return Linear


def _tuner_layers(inner: nn.Module) -> list[tuple[str, nn.Module]]:
    try:
        from peft.tuners.tuners_utils import BaseTunerLayer
    except ImportError:
        return []
    return [(name, module) for name, module in inner.named_modules() if isinstance(module, BaseTunerLayer)]


_NO_ADAPTER = "the model has no PEFT adapter to fold"


def merge_unavailable(model) -> str | None:
    """Why the adapter of ``model`` cannot be folded into a copy of its weights, in words, or None when it can.

    Folded are plain LoRA layers on ``nn.Linear`` weights of a float dtype, adapters active and not merged already;
    DoRA and other variants, LoRA biases, other tuners and quantized weights keep the adapter path."""
    from rapo_trl.rollout.backends.kv_decode import unwrapped_model

    inner = unwrapped_model(model)
    layers = _tuner_layers(inner)
    if inner is model or not layers:
        return _NO_ADAPTER
    lora_linear = _lora_linear_type()
    for name, layer in layers:
        if type(layer) is not lora_linear:
            return f"{name} is a {type(layer).__name__}, not a LoRA nn.Linear layer"
        if layer.disable_adapters or layer.merged:
            return f"{name}'s adapter is disabled or already merged"
        base = layer.get_base_layer()
        if type(base) is not nn.Linear or not base.weight.dtype.is_floating_point:
            return f"{name}'s frozen weight is a {type(base).__name__} of {base.weight.dtype} (quantized?)"
        for adapter in layer.active_adapters:
            if getattr(layer, "use_dora", {}).get(adapter) or getattr(layer, "lora_variant", {}).get(adapter):
                return f"{name} uses a LoRA variant (DoRA or another) for adapter {adapter!r}"
            if getattr(layer, "lora_bias", {}).get(adapter):
                return f"{name} has a LoRA bias for adapter {adapter!r}"
    return None


@dataclass
class _Fold:
    """One adapted layer of the copy: the PEFT layer it folds and the weight it writes."""

    layer: nn.Module
    weight: torch.Tensor

    def adapters(self) -> list[str]:
        """The active adapters this layer holds (an adapter may target other layers only), as PEFT's forward runs."""
        return [a for a in self.layer.active_adapters if a in self.layer.lora_A]

    def key(self) -> tuple:
        tensors = [self.layer.get_base_layer().weight]
        adapters = self.adapters()
        for adapter in adapters:
            tensors += [self.layer.lora_A[adapter].weight, self.layer.lora_B[adapter].weight]
        return (tuple(adapters), tuple(self.layer.scaling[a] for a in adapters),
                tuple((t.data_ptr(), t._version) for t in tensors))

    @torch.no_grad()
    def write(self) -> None:
        merged = self.layer.get_base_layer().weight.float()
        for adapter in self.adapters():
            merged = merged + self.layer.get_delta_weight(adapter).float()
        self.weight.copy_(merged)  # rounded once, to the frozen weight's dtype


def _adapter_layout(inner: nn.Module) -> tuple:
    """Which adapters each PEFT module of ``inner`` runs (LoRA layers, ``modules_to_save`` and other wrappers): the
    copy holds these modules' own state, so it is built again when it changes (``set_adapter``, ``disable_adapter``)."""
    try:
        from peft.tuners.tuners_utils import BaseTunerLayer
        from peft.utils.other import AuxiliaryTrainingWrapper
    except ImportError:
        return ()
    return tuple(
        (name, tuple(module.active_adapters), bool(module.disable_adapters))
        for name, module in inner.named_modules()
        if isinstance(module, (BaseTunerLayer, AuxiliaryTrainingWrapper))
    )


def _module_tree_sharing_tensors(inner: nn.Module) -> nn.Module:
    """A copy of ``inner``'s modules whose parameters, buffers and config are ``inner``'s own objects."""
    memo = {id(t): t for t in (*inner.parameters(), *inner.buffers())}
    for name in ("config", "generation_config"):
        if getattr(inner, name, None) is not None:
            memo[id(getattr(inner, name))] = getattr(inner, name)
    return copy.deepcopy(inner, memo)


def _replace(root: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(root.get_submodule(parent) if parent else root, child, module)


class DecodeModel:
    """Builds and keeps the model the KV-cache loop decodes with (``model_for``).

    Args:
        merged_weights: fold a PEFT model's LoRA adapter into a copy of the adapted weights (off by default: opt in
            until `bench_step.py`'s side-by-side arms and a same-seed learning pair show it pays and learns alike;
            in bf16 its greedy turns are not bit-identical to the adapter path's). ``merge_unavailable`` says when it
            cannot, and the adapter path runs.
        head_kernel: the LM head's kernel (``HEAD_KERNELS``); ``linear`` is the model's own ``nn.Linear``.
    """

    def __init__(self, merged_weights: bool = False, head_kernel: str = "linear"):
        if head_kernel not in HEAD_KERNELS:
            raise ValueError(f"unknown LM head kernel {head_kernel!r}; one of {HEAD_KERNELS}")
        self.merged_weights, self.head_kernel = merged_weights, head_kernel
        self.merge_unavailable: str | None = None
        """Why the last ``model_for`` did not fold the adapter, or None when it did."""
        self.weights: str | None = None
        """What the last ``model_for`` decoded on: ``"merged"``, ``"adapter"`` (through PEFT) or ``"model"``."""
        self.refreshes = 0
        self.refresh_seconds = 0.0
        """Wall seconds spent folding, over all refreshes."""
        self._source: nn.Module | None = None
        self._copy: nn.Module | None = None
        self._folds: list[_Fold] = []
        self._head_kernel: str | None = None
        self._key: tuple | None = None
        self._layout: tuple | None = None
        self._reported: set[str] = set()

    @property
    def extra_bytes(self) -> int:
        """Memory the folded weights take beyond the policy's own (0 without a fold)."""
        return sum(f.weight.numel() * f.weight.element_size() for f in self._folds)

    def model_for(self, model) -> nn.Module:
        """The module to decode ``model`` with: ``model`` itself when nothing changes, else the copy, folded
        again first when the adapter changed since the last call."""
        from rapo_trl.rollout.backends.kv_decode import unwrapped_model

        inner = unwrapped_model(model)
        fold = self._fold(model, wanted=self.merged_weights)
        head = self._head(inner)
        self.weights = "merged" if fold else "adapter" if inner is not model else "model"
        if not fold and head is None:
            self._copy, self._folds, self._source = None, [], None  # nothing of a former copy stays in memory
            return model
        layout = _adapter_layout(inner)
        if (self._source is not model or self._copy is None or bool(self._folds) != fold or head != self._head_kernel
                or layout != self._layout):
            self._build(inner, fold, head)
            self._source, self._layout = model, layout
        if self._folds:
            key = tuple(f.key() for f in self._folds)
            if key != self._key:
                start = time.perf_counter()
                for f in self._folds:
                    f.write()
                self.refresh_seconds += time.perf_counter() - start
                self.refreshes += 1
                self._key = key
        return self._copy

    def _fold(self, model, wanted: bool) -> bool:
        reason = merge_unavailable(model) if wanted else "merged weights are off"
        self.merge_unavailable = reason
        if reason is not None and wanted and reason not in self._reported:
            self._reported.add(reason)
            logger.warning("RAPO: decoding through the LoRA adapter, not on merged weights, because %s.", reason)
        return reason is None

    def _head(self, inner: nn.Module) -> str | None:
        """The head kernel to install, or None to keep the model's own head."""
        if type(inner.get_output_embeddings()) is not nn.Linear or self.head_kernel == "linear":
            return None
        return self.head_kernel

    @torch.no_grad()
    def _build(self, inner: nn.Module, fold: bool, head_kernel: str | None) -> None:
        self._copy, self._folds, self._key = None, [], None  # the old copy's weights go before the new ones come
        self._head_kernel = head_kernel
        tree = _module_tree_sharing_tensors(inner)
        if fold:
            for name, layer in _tuner_layers(inner):  # the copy has the same module names
                base = layer.get_base_layer()
                linear = nn.Linear(base.in_features, base.out_features, bias=False, device="meta")
                weight = torch.empty_like(base.weight, requires_grad=False)
                linear.weight = nn.Parameter(weight, requires_grad=False)
                linear.bias = base.bias
                _replace(tree, name, linear)
                self._folds.append(_Fold(layer, weight))
        if head_kernel is not None:
            head = inner.get_output_embeddings()
            name = next(n for n, m in inner.named_modules() if m is head)
            _replace(tree, name, _Head(tree.get_submodule(name), head_kernel))
        tree.eval()
        self._copy = tree
