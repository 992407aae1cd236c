"""A GPU patched in (or out) for the hardware rule's tests, without leaking into later tests.

transformers caches its hardware probes (``is_torch_cuda_available``, ``is_torch_bf16_gpu_available``)
for the process; one first asked while a GPU is patched in would keep answering "GPU" for the rest
of the session. Test modules that patch import ``fresh_hardware_probes`` (an autouse fixture), which
clears those caches around each test.
"""

from __future__ import annotations

import pytest
import torch


def clear_probe_caches() -> None:
    from transformers.utils import import_utils

    for probe in vars(import_utils).values():
        if callable(getattr(probe, "cache_clear", None)):
            probe.cache_clear()


def fake_gpu(monkeypatch, native_bf16: bool) -> None:
    """torch sees a CUDA GPU; with ``native_bf16`` an Ampere+ one, else a T4 (bf16 only emulated). Its CPU has no
    bf16 instructions (``cpu_bf16`` after this call says otherwise)."""
    cpu_bf16(monkeypatch, native=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported",
                        lambda including_emulation=True: native_bf16 or including_emulation)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    clear_probe_caches()


def cpu_bf16(monkeypatch, native: bool) -> None:
    """The CPU reports AVX512-BF16 (``native``) or no bf16 instructions at all."""
    capabilities = {**torch.cpu.get_capabilities(), "avx512_bf16": native, "amx_bf16": False}
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: capabilities)


def no_gpu(monkeypatch) -> None:
    """torch sees neither CUDA nor MPS, and the CPU has no bf16 instructions (so the rule answers fp32 there;
    ``cpu_bf16(monkeypatch, native=True)`` after this call gives a CPU that has them)."""
    cpu_bf16(monkeypatch, native=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    clear_probe_caches()


@pytest.fixture(autouse=True)
def fresh_hardware_probes(monkeypatch):
    yield
    monkeypatch.undo()  # the real torch first, then forget what the patched one answered
    clear_probe_caches()
