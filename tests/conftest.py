"""Shared fixtures: offline environment, the tiny model, and the SmolLM2 folder."""

from __future__ import annotations

import os

for _name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ[_name] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")

import pytest  # noqa: E402


def pytest_configure(config):
    """Under pytest-xdist (``make test`` runs ``-n auto``), the workers share the machine's cores: each worker, and the
    processes its tests start, computes with its share of them rather than with one torch thread per core, which
    would put workers x cores threads on the cores."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not workers:
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    threads = str(max(1, cores // int(workers)))
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, threads)
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A saved tiny Qwen2 checkpoint with the offline BPE tokenizer (built once per session)."""
    from rapo_trl.models import build_tiny_model

    path = tmp_path_factory.mktemp("tiny-qwen2")
    build_tiny_model(path)
    return path


@pytest.fixture
def tiny_model(tiny_model_dir):
    """A fresh copy of the tiny model and its tokenizer, loaded from the saved folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir), AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="session")
def smollm2_dir():
    """SmolLM2-135M-Instruct as an HF folder (converted once into the user cache)."""
    pytest.importorskip("gguf")
    from rapo_trl.models import smollm2_path

    try:
        return smollm2_path()
    except ModuleNotFoundError as error:
        pytest.skip(str(error))


# Property tests draw the same examples on every run: CI must not pass or fail by the luck of the draw.
try:
    from hypothesis import settings as _hypothesis_settings

    _hypothesis_settings.register_profile("rapo", derandomize=True)
    _hypothesis_settings.load_profile("rapo")
except ImportError:  # hypothesis is a dev dependency; without it the property tests are not collected
    pass
