"""Two training processes (torchrun + accelerate, CPU/gloo): a group straddling them gets globally normalised
retrieval advantages and hybrid rows by global index."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rapo_trl.objective import group_normalize


@pytest.mark.slow
def test_group_straddling_two_processes(tiny_model_dir, tmp_path):
    script = Path(__file__).with_name("multiprocess_rollout_script.py")
    # torchrun: accelerate reads its WORLD_SIZE/RANK and runs MULTI_CPU with gloo.
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29577",
           str(script), str(tiny_model_dir), str(tmp_path)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["hybrid"] == [True, True] and ranks[1]["hybrid"] == [False, False]
    assert ranks[0]["hybrid_share"] == ranks[1]["hybrid_share"] == 0.5  # gathered over both processes
    z = torch.tensor(ranks[0]["z"] + ranks[1]["z"])
    assert z[0] != 0 and z[1] != 0 and z[2] == 0 and z[3] == 0
    rewards = torch.tensor([1.0, 2.0, 3.0, 0.0])  # '7' counts of the four scripted answers
    a_acc = (rewards - rewards.mean()) / (rewards.std() + 1e-4)
    expected = a_acc * (1 + 0.2 * group_normalize(z, 4, eps=1e-6))  # A_ret: the paper's eps (RAPOConfig default)
    got = torch.tensor(ranks[0]["advantages"] + ranks[1]["advantages"])
    assert torch.allclose(got, expected, atol=1e-5)
    f_ret = torch.tensor(ranks[0]["f_ret"] + ranks[1]["f_ret"])
    assert torch.allclose(torch.tensor(ranks[0]["shift"] + ranks[1]["shift"]), torch.log1p(0.05 * f_ret), atol=1e-6)
