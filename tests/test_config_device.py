"""The CPU that bf16 needs on a machine without a GPU is chosen for that machine only: it is not saved with the
run's arguments, so arguments reused on a GPU machine train on its GPU."""

from __future__ import annotations

import pickle

from rapo_trl.config import RAPOConfig
from tests.helpers.hardware import cpu_bf16, fake_gpu, fresh_hardware_probes, no_gpu  # noqa: F401


def bf16_cpu_args(monkeypatch, tmp_path, **kwargs):
    no_gpu(monkeypatch)
    cpu_bf16(monkeypatch, native=True)
    return RAPOConfig(output_dir=str(tmp_path), report_to="none", **kwargs)


def test_bf16_on_a_cpu_only_machine_sets_use_cpu_here_but_saves_the_value_given(monkeypatch, tmp_path):
    args = bf16_cpu_args(monkeypatch, tmp_path)
    assert args.bf16 and args.use_cpu  # transformers needs it to run bf16 here
    assert args.to_dict()["use_cpu"] is False
    again = RAPOConfig(**{k: v for k, v in args.to_dict().items() if k in ("output_dir", "bf16", "use_cpu")},
                       report_to="none")
    assert again.bf16 and again.use_cpu  # reusing the saved values here works too


def test_saved_arguments_loaded_on_a_gpu_machine_train_on_the_gpu(monkeypatch, tmp_path):
    saved = pickle.dumps(bf16_cpu_args(monkeypatch, tmp_path))  # what Trainer writes as training_args.bin
    assert pickle.loads(saved).use_cpu  # loaded back on the same machine: still the CPU
    fake_gpu(monkeypatch, native_bf16=True)
    loaded = pickle.loads(saved)
    assert loaded.bf16 and not loaded.use_cpu


def test_an_explicit_use_cpu_is_kept_everywhere(monkeypatch, tmp_path):
    saved = pickle.dumps(bf16_cpu_args(monkeypatch, tmp_path, use_cpu=True))
    fake_gpu(monkeypatch, native_bf16=True)
    loaded = pickle.loads(saved)
    assert loaded.use_cpu and loaded.to_dict()["use_cpu"] is True
