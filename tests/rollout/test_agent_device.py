"""The agent loader asks for the device and dtype the hardware rule picked (GPU patched in, no GPU needed)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

from rapo_trl.rollout.agent import RolloutAgent, load_policy
from tests.helpers.hardware import fake_gpu, fresh_hardware_probes, no_gpu  # noqa: F401


@pytest.fixture
def loads(monkeypatch):
    """Records what ``from_pretrained`` is asked for, then loads for real on the CPU in fp32 (this machine)."""
    asked = []
    real = PreTrainedModel.from_pretrained.__func__  # every model class (and PEFT's base load) ends here

    def recording(cls, path, *args, **kwargs):
        asked.append({"device_map": kwargs.get("device_map"), "dtype": kwargs.get("dtype")})
        return real(cls, path, *args, **{**kwargs, "device_map": "cpu", "dtype": torch.float32})

    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(recording))
    # PEFT puts adapter weights where torch sees an accelerator (the patched GPU): here, the CPU.
    monkeypatch.setattr("peft.peft_model.infer_device", lambda: "cpu")
    return asked


@pytest.fixture(scope="module")
def adapter_dir(tiny_model_dir, tmp_path_factory):
    """A LoRA adapter folder on the tiny model (its base is loaded by path)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("tiny-adapter")
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                           LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"]))
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("native_bf16, dtype", [(True, torch.bfloat16), (False, torch.float16)])
@pytest.mark.parametrize("kind", ["model", "adapter"])
def test_loader_asks_for_the_gpu(monkeypatch, loads, tiny_model_dir, adapter_dir, native_bf16, dtype, kind):
    fake_gpu(monkeypatch, native_bf16)
    load_policy(str(tiny_model_dir if kind == "model" else adapter_dir))
    assert loads == [{"device_map": "cuda", "dtype": dtype}]


def test_agent_asks_for_the_gpu_and_an_override_wins(monkeypatch, loads, tiny_model_dir):
    fake_gpu(monkeypatch, native_bf16=True)
    RolloutAgent.from_pretrained(str(tiny_model_dir))
    RolloutAgent.from_pretrained(str(tiny_model_dir), device="cpu")
    RolloutAgent.from_pretrained(str(tiny_model_dir), dtype="fp32")
    assert loads == [{"device_map": "cuda", "dtype": torch.bfloat16}, {"device_map": "cpu", "dtype": torch.float32},
                     {"device_map": "cuda", "dtype": torch.float32}]


def test_on_a_cpu_machine_the_model_runs_on_the_cpu_in_fp32(monkeypatch, tiny_model_dir, adapter_dir):
    no_gpu(monkeypatch)
    for path in (tiny_model_dir, adapter_dir):
        model, _ = load_policy(str(path))
        assert {(p.device.type, p.dtype) for p in model.parameters()} == {("cpu", torch.float32)}
        assert not model.training


def test_asking_for_an_absent_gpu_is_one_clear_error(monkeypatch, tiny_model_dir):
    no_gpu(monkeypatch)
    with pytest.raises(ValueError, match="no CUDA GPU"):
        load_policy(str(tiny_model_dir), device="cuda")
