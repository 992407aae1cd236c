"""The one rule for device and precision, with the hardware patched (no GPU is needed)."""

from __future__ import annotations

import pytest
import torch

from rapo_trl import hardware
from rapo_trl.config import RAPOConfig
from tests.helpers.hardware import cpu_bf16, fake_gpu, fresh_hardware_probes, no_gpu  # noqa: F401


def test_ampere_gpu_gets_cuda_bf16(monkeypatch):
    fake_gpu(monkeypatch, native_bf16=True)
    place = hardware.placement()
    assert (place.device, place.precision, place.dtype) == ("cuda", "bf16", torch.bfloat16)


def test_gpu_without_native_bf16_gets_fp16(monkeypatch):
    fake_gpu(monkeypatch, native_bf16=False)  # torch would still say True counting emulation
    place = hardware.placement()
    assert (place.device, place.precision, place.dtype) == ("cuda", "fp16", torch.float16)


def test_cpu_machine_without_bf16_instructions_gets_cpu_fp32(monkeypatch):
    no_gpu(monkeypatch)
    cpu_bf16(monkeypatch, native=False)
    place = hardware.placement()
    assert (place.device, place.precision, place.dtype) == ("cpu", "fp32", torch.float32)


def test_cpu_with_avx512_bf16_gets_cpu_bf16(monkeypatch):
    no_gpu(monkeypatch)
    cpu_bf16(monkeypatch, native=True)
    place = hardware.placement()
    assert (place.device, place.precision, place.dtype) == ("cpu", "bf16", torch.bfloat16)
    assert hardware.placement(dtype="fp32").precision == "fp32"  # an explicit dtype still wins


def test_the_rule_reads_this_cpus_own_capabilities():
    capabilities = torch.cpu.get_capabilities()
    native = bool(capabilities.get("avx512_bf16") or capabilities.get("amx_bf16"))
    assert hardware.cpu_computes_bf16() is native
    assert hardware.default_precision("cpu") == ("bf16" if native else "fp32")


def test_lora_frozen_weights_load_in_the_half_type_of_the_mixed_precision():
    assert hardware.frozen_weights_dtype(bf16=True, fp16=False) == "bfloat16"
    assert hardware.frozen_weights_dtype(bf16=False, fp16=True) == "float16"
    assert hardware.frozen_weights_dtype(bf16=False, fp16=False) is None


def test_each_process_of_a_distributed_launch_gets_its_own_gpu(monkeypatch):
    fake_gpu(monkeypatch, native_bf16=True)
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert hardware.default_device() == "cuda:3"


def test_explicit_device_and_dtype_win(monkeypatch):
    fake_gpu(monkeypatch, native_bf16=True)
    cpu_bf16(monkeypatch, native=False)
    assert hardware.placement("cpu") == hardware.Placement("cpu", "fp32")
    assert hardware.placement(dtype="float32") == hardware.Placement("cuda", "fp32")
    assert hardware.placement("cuda:1", torch.float16) == hardware.Placement("cuda:1", "fp16")
    assert hardware.placement(dtype="bfloat16").dtype is torch.bfloat16


@pytest.mark.parametrize(
    "device, dtype, message",
    [("cuda", None, "no CUDA GPU"), ("tpu", None, "unknown device"), ("cpu", "int8", "unknown dtype"),
     ("cpu", torch.int8, "unsupported model dtype")],
)
def test_bad_device_or_dtype_is_one_clear_error(monkeypatch, device, dtype, message):
    no_gpu(monkeypatch)
    with pytest.raises(ValueError, match=message):
        hardware.placement(device, dtype)


def test_train_device_must_agree_with_use_cpu(monkeypatch):
    fake_gpu(monkeypatch, native_bf16=True)
    hardware.check_trainer_device(None, use_cpu=False)
    hardware.check_trainer_device("cuda", use_cpu=False)
    hardware.check_trainer_device("cpu", use_cpu=True)
    with pytest.raises(ValueError, match="--use_cpu true"):
        hardware.check_trainer_device("cpu", use_cpu=False)
    with pytest.raises(ValueError, match="use_cpu to false"):
        hardware.check_trainer_device("cuda", use_cpu=True)


# --- RAPOConfig's precision default is the same rule ---------------------------------------------------


def make(**kwargs) -> RAPOConfig:
    # pad_to_multiple_of="auto" would ask TrainingArguments for its device, which a patched GPU cannot give.
    return RAPOConfig(output_dir="unused", report_to="none", pad_to_multiple_of=None, **kwargs)


def test_config_on_a_cpu_machine_defaults_to_fp32(monkeypatch):
    no_gpu(monkeypatch)
    cpu_bf16(monkeypatch, native=False)
    cfg = make()  # TRL's own default (bf16) raises "Your setup doesn't support bf16/gpu" here
    assert (cfg.bf16, cfg.fp16) == (False, False)
    assert (make(use_cpu=True).bf16, make(use_cpu=True).fp16) == (False, False)


def test_config_on_a_cpu_with_bf16_instructions_defaults_to_bf16(monkeypatch):
    no_gpu(monkeypatch)
    cpu_bf16(monkeypatch, native=True)
    assert (make().bf16, make().fp16) == (True, False)
    assert (make(use_cpu=True).bf16, make(bf16=False).bf16) == (True, False)


def skip_device_setup(monkeypatch) -> None:
    """TrainingArguments sets up the (patched, absent) GPU right after RAPOConfig chose the precision: skip
    TRL's and transformers' part of __post_init__, keep RAPOConfig's."""
    from trl import GRPOConfig

    monkeypatch.setattr(GRPOConfig, "__post_init__", lambda self: None)


@pytest.mark.parametrize("native_bf16, expected", [(True, (True, False)), (False, (False, True))])
def test_config_on_a_gpu_follows_the_rule(monkeypatch, native_bf16, expected):
    fake_gpu(monkeypatch, native_bf16)
    cpu_bf16(monkeypatch, native=False)
    skip_device_setup(monkeypatch)
    cfg = make()
    assert (cfg.bf16, cfg.fp16) == expected
    cfg = make(use_cpu=True)  # the trainer runs on this CPU, which has no bf16 instructions: fp32
    assert (cfg.bf16, cfg.fp16) == (False, False)


def test_config_explicit_precision_wins(monkeypatch):
    fake_gpu(monkeypatch, native_bf16=True)
    skip_device_setup(monkeypatch)
    assert (make(bf16=False).bf16, make(bf16=False).fp16) == (False, False)
    cfg = make(fp16=True)
    assert (cfg.bf16, cfg.fp16) == (None, True)  # bf16 left to TRL, which sets False beside fp16
    monkeypatch.undo()
    no_gpu(monkeypatch)
    cfg = make(bf16=True, use_cpu=True)
    assert (cfg.bf16, cfg.fp16) == (True, False)
