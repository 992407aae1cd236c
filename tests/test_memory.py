"""The freed heap handed back after a CPU training step (rapo_trl/memory.py)."""

import ctypes
import ctypes.util
import subprocess
import sys

import pytest
import torch

from rapo_trl.memory import ReleaseFreedMemory, with_freed_memory_release
from tests.helpers.trainers import rapo_trainer

glibc = pytest.mark.skipif(not hasattr(ctypes.CDLL(ctypes.util.find_library("c")), "malloc_trim"),
                           reason="malloc_trim is glibc's")


_FRAGMENT = """
import ctypes, ctypes.util, resource, torch
from rapo_trl.memory import release_freed_memory
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize() / 2**20
# What a long run's heap looks like: glibc's mmap threshold has grown past the blocks (set here at once), and a
# small tensor kept between blocks stops free() from trimming the heap's top.
ctypes.CDLL(ctypes.util.find_library("c")).mallopt(-3, 32 * 2**20)  # M_MMAP_THRESHOLD
blocks, keepers = [], []
for _ in range(40):
    blocks.append(torch.ones(2**20))  # 4 MiB, touched
    keepers.append(torch.ones(2**16))  # 256 KiB: no freed chunk fits it, so it comes from the heap top
before = rss()
blocks.clear()
freed = rss()
released = release_freed_memory()
print(before, freed, rss(), released)
"""


@glibc
def test_fragmented_heap_goes_back_to_the_system():
    out = subprocess.run([sys.executable, "-c", _FRAGMENT], capture_output=True, text=True, check=True).stdout
    before, freed, after, released = out.split()
    assert released == "True"
    assert float(freed) > float(before) - 40  # free() alone kept most of the 160 MiB
    assert float(after) < float(freed) - 100  # the release gave it back


def test_the_callback_joins_cpu_training_only():
    assert with_freed_memory_release(None, torch.device("cuda")) is None
    theirs = object()
    added = with_freed_memory_release([theirs], torch.device("cpu"))
    assert added[0] is theirs and isinstance(added[1], ReleaseFreedMemory) and len(added) == 2


def test_rapo_trainer_on_cpu_releases_after_each_step(tiny_model_dir, tmp_path):
    trainer = rapo_trainer(tiny_model_dir, tmp_path)
    assert any(isinstance(cb, ReleaseFreedMemory) for cb in trainer.callback_handler.callbacks)
