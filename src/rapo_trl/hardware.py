"""Where a model runs and in which precision: one rule for every model path.

The trainer's precision default (``RAPOConfig``), the evaluation and build-store agents
(``load_policy``), the SFT warm start and the embedder all ask here, so a GPU machine uses its GPU on
every path and a CPU machine computes in bf16 exactly where its cores do so natively.

- device: CUDA when torch sees a GPU (``cuda:$LOCAL_RANK`` under a distributed launcher), else Apple
  MPS, else the CPU.
- precision: bf16 where the device computes it natively (Ampere and newer, MPS on macOS >= 14), fp16
  on GPUs without it (T4, V100); on the CPU bf16 where it has AVX512-BF16 or AMX-BF16 (faster than fp32 there:
  benchmarks/results/measurements_notes.md), else fp32 (emulated bf16 is several times slower than fp32).
- LoRA: the frozen base weights load in that half precision and the adapters stay fp32 (PEFT upcasts
  them), as mixed-precision LoRA training is usually run; see :func:`frozen_weights_dtype`.

An explicit ``device`` / ``dtype`` always wins.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass

PRECISIONS = ("bf16", "fp16", "fp32")
# default_precision's rule in words, for the command line's help (``--device``, ``--dtype``).
PRECISION_RULE = (
    "bf16 where the device computes it natively (a GPU from Ampere on, MPS on macOS 14+, a CPU with "
    "AVX512-BF16/AMX), else fp16 on a GPU and fp32 on MPS or the CPU"
)
_PRECISION_ALIASES = {
    "bf16": "bf16", "bfloat16": "bf16",
    "fp16": "fp16", "float16": "fp16", "half": "fp16",
    "fp32": "fp32", "float32": "fp32", "float": "fp32",
}


def default_device() -> str:
    """``"cuda"`` (``"cuda:N"`` for local rank N) when a CUDA GPU is visible, else ``"mps"``, else ``"cpu"``."""
    import torch

    if torch.cuda.is_available():
        # Under accelerate/torchrun each process owns the GPU of its local rank; plain "cuda" would be
        # the current device, which is GPU 0 in every process until accelerate sets it.
        rank = os.environ.get("LOCAL_RANK")
        return f"cuda:{int(rank)}" if rank and rank.isdigit() else "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return "cpu"


def check_device(device: str) -> str:
    """``device`` if torch can use it here, else one clear error."""
    import torch

    kind = device.split(":", 1)[0]
    if kind == "cpu":
        return device
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device '{device}' was asked for, but torch sees no CUDA GPU here; use 'cpu'")
        return device
    if kind == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise ValueError(f"device '{device}' was asked for, but torch sees no Apple MPS device here; use 'cpu'")
        return device
    raise ValueError(f"unknown device '{device}'; use cuda, cuda:N, mps or cpu")


def default_precision(device: str | None = None) -> str:
    """``"bf16"``, ``"fp16"`` or ``"fp32"`` for ``device`` (default: :func:`default_device`)."""
    import torch

    kind = (device or default_device()).split(":", 1)[0]
    if kind == "cuda":
        # Native bf16 only: torch also reports True on pre-Ampere GPUs, where bf16 is emulated and slow.
        return "bf16" if torch.cuda.is_bf16_supported(including_emulation=False) else "fp16"
    if kind == "mps":
        mps = torch.backends.mps
        return "bf16" if hasattr(mps, "is_macos_or_newer") and mps.is_macos_or_newer(14, 0) else "fp32"
    return "bf16" if cpu_computes_bf16() else "fp32"


def cpu_computes_bf16() -> bool:
    """Whether this CPU has bf16 instructions (AVX512-BF16 or AMX-BF16), as torch reports them."""
    import torch

    capabilities = torch.cpu.get_capabilities() if hasattr(torch.cpu, "get_capabilities") else {}
    return bool(capabilities.get("avx512_bf16") or capabilities.get("amx_bf16"))


def threads_per_process(processes: int) -> int:
    """An equal share of this process's torch threads among ``processes`` processes run at once (at least one each).
    torch's count already follows the CPU affinity (``taskset``) and ``OMP_NUM_THREADS``."""
    import torch

    return max(1, torch.get_num_threads() // processes)


def frozen_weights_dtype(bf16: bool, fp16: bool) -> str | None:
    """The dtype to load a LoRA run's frozen base weights in: the mixed precision's half type, or None (fp32).

    Under autocast, fp32 frozen weights are cast to the half type at every matmul, on every decoded token;
    loaded in it they are not. The adapters stay fp32 (PEFT's ``autocast_adapter_dtype``), so the optimizer
    updates fp32 master weights, and a merge is done over the fp32 base (``cli/warm_start.py``).
    """
    return "bfloat16" if bf16 else "float16" if fp16 else None


def trains_base_weights(peft_config) -> bool:
    """Whether ``peft_config`` trains weights of the base model itself (``modules_to_save`` copies, LoRA/IA3 biases),
    which PEFT's ``autocast_adapter_dtype`` leaves in the dtype the base was loaded in."""
    return bool(getattr(peft_config, "modules_to_save", None)) or getattr(peft_config, "bias", "none") not in (
        "none", None)


def to_precision(dtype) -> str:
    """``"bf16"``/``"fp16"``/``"fp32"`` from a ``torch.dtype`` or a name (``"bfloat16"``, ``"fp16"``, ...)."""
    import torch

    by_dtype = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
    if isinstance(dtype, torch.dtype):
        if dtype not in by_dtype:
            raise ValueError(f"unsupported model dtype {dtype}; use bfloat16, float16 or float32")
        return by_dtype[dtype]
    name = str(dtype).lower().removeprefix("torch.")
    if name not in _PRECISION_ALIASES:
        raise ValueError(f"unknown dtype '{dtype}'; use bf16, fp16 or fp32")
    return _PRECISION_ALIASES[name]


@dataclass(frozen=True)
class Placement:
    """Where a model runs (``device``) and the dtype its weights are loaded in (``precision``)."""

    device: str
    precision: str

    @property
    def dtype(self):
        import torch

        return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[self.precision]


def placement(device: str | None = None, dtype=None) -> Placement:
    """The rule's device and precision; an explicit ``device`` or ``dtype`` overrides its half."""
    device = check_device(device) if device else default_device()
    precision = to_precision(dtype) if dtype is not None else default_precision(device)
    return Placement(device, precision)


def trainer_device(use_cpu: bool) -> str:
    """Where TRL/accelerate put the trainer's model: the CPU with ``use_cpu``, else the rule's device."""
    return "cpu" if use_cpu else default_device()


def check_trainer_device(device: str | None, use_cpu: bool) -> None:
    """``rapo train --device``: the trainer runs where accelerate puts it, so only agreement is accepted."""
    if not device:
        return
    check_device(device)
    where = trainer_device(use_cpu)
    if device.split(":", 1)[0] != where.split(":", 1)[0]:
        hint = "pass --use_cpu true" if device == "cpu" else "set use_cpu to false"
        raise ValueError(f"rapo train runs on '{where}' (TRL's use_cpu={use_cpu}), not device '{device}'; "
                         f"to train there, {hint}")


def with_frozen_weights_in_half(model, args, peft_config, quantization_config):
    """``args``, or for a LoRA run loaded by id or path under bf16/fp16 mixed precision a copy of it whose
    ``model_init_kwargs["dtype"]`` loads the frozen base in that half type (``frozen_weights_dtype``; adapters stay
    fp32). The caller's config is never changed. An explicit ``model_init_kwargs["dtype"]``, a model object, a
    quantized load, or a PEFT config that trains base weights (``modules_to_save``, a ``bias`` other than ``"none"``:
    PEFT leaves those in the base's dtype, so they load in fp32 as GRPOTrainer loads them) is left as it is."""
    init_kwargs = half_frozen_init_kwargs(model, args.model_init_kwargs, args, peft_config, quantization_config)
    if init_kwargs is args.model_init_kwargs:
        return args
    args = copy.copy(args)
    args.model_init_kwargs = init_kwargs
    return args


def half_frozen_init_kwargs(model, init_kwargs: dict | None, args, peft_config, quantization_config) -> dict | None:
    """``init_kwargs`` as :func:`with_frozen_weights_in_half` would leave them (the object itself when unchanged),
    without touching ``args`` (read for its ``bf16`` and ``fp16``)."""
    kwargs = init_kwargs or {}
    quantized = quantization_config is not None or "quantization_config" in kwargs
    if not isinstance(model, str) or peft_config is None or quantized or "dtype" in kwargs:
        return init_kwargs
    if trains_base_weights(peft_config):
        # PEFT upcasts only its adapter layers: a trained copy of a base module or a trained base bias would keep the
        # half type, and the optimizer would round every update into it (lost where smaller than its spacing).
        return init_kwargs
    dtype = frozen_weights_dtype(bool(args.bf16), bool(args.fp16))
    return init_kwargs if dtype is None else {**kwargs, "dtype": dtype}
