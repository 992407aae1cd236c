"""Where a model runs and in which precision: one rule for every model path.

The trainer's precision default (``RAPOConfig``), the evaluation and build-store agents
(``load_policy``), the SFT warm start and the embedder all ask here, so a GPU machine uses its GPU on
every path and a CPU machine runs everything in fp32 as before.

- device: CUDA when torch sees a GPU (``cuda:$LOCAL_RANK`` under a distributed launcher), else Apple
  MPS, else the CPU.
- precision: bf16 where the device computes it natively (Ampere and newer, MPS on macOS >= 14), fp16
  on GPUs without it (T4, V100), fp32 on the CPU (emulated bf16 is several times slower than fp32 on
  CPUs without AVX512-BF16/AMX).

An explicit ``device`` / ``dtype`` always wins.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

PRECISIONS = ("bf16", "fp16", "fp32")
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
    return "fp32"


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
