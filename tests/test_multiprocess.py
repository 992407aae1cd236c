"""Two training processes (torchrun + accelerate, CPU/gloo): a group straddling them gets globally normalised
retrieval advantages and hybrid rows by global index; dynamic sampling runs the same rounds on both; `trainer.train()`
runs under DistributedDataParallel, with LoRA, a shared embedded store and the retrieved-token loss too."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rapo_trl.core.objective import group_normalize
from tests.helpers.chroma_server import free_port

SCENARIOS = {
    "straddling": ("multiprocess_rollout_script",),
    "dynamic_sampling": ("multiprocess_dynamic_sampling_script", "dynamic_sampling"),
    "group_failed": ("multiprocess_dynamic_sampling_script", "group_failed"),
    "token_loss": ("multiprocess_token_loss_script",),
    "both_flat": ("multiprocess_dynamic_sampling_script", "both_flat"),
    "train": ("multiprocess_train_script",),
    "lora_retrieval": ("multiprocess_train_script", "lora_retrieval"),
}
"""Scenario -> ``tests/<script>.py`` and its extra arguments."""


@pytest.fixture(scope="module")
def two_processes(tiny_model_dir, tmp_path_factory) -> dict[str, list[dict]]:
    """What each rank dumped in each scenario. One torchrun runs them all in turn (accelerate reads its
    WORLD_SIZE/RANK and runs MULTI_CPU with gloo): each process imports torch, transformers and TRL once."""
    out = tmp_path_factory.mktemp("two-processes")
    scenarios = []
    for name, (script, *extra) in SCENARIOS.items():
        (out / name).mkdir()
        scenarios.append([script, str(out / name), *extra])
    runner = Path(__file__).with_name("multiprocess_scenarios.py")
    # A free port, not a fixed one: under pytest-xdist another worker may be running a torchrun of its own
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
           str(runner), str(tiny_model_dir), json.dumps(scenarios)]
    # A rank that hangs in a collective (a term gathered on one rank only) ends here, not in CI's limit.
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return {name: [json.loads((out / name / f"rank{r}.json").read_text()) for r in (0, 1)] for name in SCENARIOS}


@pytest.mark.slow
def test_group_straddling_two_processes(two_processes):
    ranks = two_processes["straddling"]
    assert ranks[0]["hybrid"] == [True, True] and ranks[1]["hybrid"] == [False, False]
    assert ranks[0]["hybrid_share"] == ranks[1]["hybrid_share"] == 0.5  # gathered over both processes
    assert ranks[0]["seconds"] == ranks[1]["seconds"]  # the slowest process's, not each its own (process 0's logged)
    # rank 0 holds the hybrid rows (rewards 1, 2; both retrieved), rank 1 the on-policy rows (3, 0): both log both
    for rank in ranks:
        assert rank["by_retrieval"] == {"rapo/reward_hybrid_retrieved": 1.5, "rapo/reward_on_policy": 1.5}
    z = torch.tensor(ranks[0]["z"] + ranks[1]["z"])
    assert z[0] != 0 and z[1] != 0 and z[2] == 0 and z[3] == 0
    rewards = torch.tensor([1.0, 2.0, 3.0, 0.0])  # '7' counts of the four scripted answers
    a_acc = (rewards - rewards.mean()) / (rewards.std() + 1e-4)
    expected = a_acc * (1 + 0.2 * group_normalize(z, 4, eps=1e-6))  # A_ret: the paper's eps (RAPOConfig default)
    got = torch.tensor(ranks[0]["advantages"] + ranks[1]["advantages"])
    assert torch.allclose(got, expected, atol=1e-5)
    f_ret = torch.tensor(ranks[0]["f_ret"] + ranks[1]["f_ret"])
    assert torch.equal(torch.tensor(ranks[0]["f_ret_batch"] + ranks[1]["f_ret_batch"]), f_ret)


@pytest.mark.slow
def test_dynamic_sampling_replaces_one_processs_flat_group_while_the_other_joins_each_round(two_processes):
    ranks = two_processes["dynamic_sampling"]
    assert ranks[0]["replaced"] == [0, 1, 2, 3] and ranks[1]["replaced"] == []
    assert len(set(ranks[0]["answers"])) == 1 and ranks[0]["answers"][0].startswith("vary:")
    assert ranks[0]["answers"][0] != "vary:1" and ranks[1]["answers"] == ["vary:1"] * 4
    tokens = [rank["metrics"].pop("dynamic_sampling/extra_completion_tokens") for rank in ranks]
    assert tokens[0] == tokens[1] > 0  # rank 0's extra rollouts, summed over both ranks
    for rank in ranks:  # gathered over both processes: the same on each
        assert rank["metrics"] == {"dynamic_sampling/signal_share_before": 0.5,
                                   "dynamic_sampling/signal_share_after": 1.0,
                                   "dynamic_sampling/replaced_share": 0.5, "dynamic_sampling/rounds": 1.0,
                                   "dynamic_sampling/extra_rollouts_per_group": 2.0, "rapo/step_has_signal": 1.0}
        assert any(a != 0 for a in rank["advantages"])


@pytest.mark.slow
def test_group_failed_guides_only_the_group_whose_on_policy_rows_failed(two_processes):
    ranks = two_processes["group_failed"]
    # G = 4, rows 0-1 of each group hybrid; rank 0's prompt scores 0 everywhere (failed), rank 1's scores > 0
    assert ranks[0]["hybrid"] == [True, True, False, False] and ranks[1]["hybrid"] == [False] * 4
    assert ranks[0]["guided_group_share"] == ranks[1]["guided_group_share"] == 0.5  # gathered over both ranks


@pytest.mark.slow
def test_retrieved_token_loss_joins_the_gather_on_every_process(two_processes):
    # Rank 0 has retrieved tokens to learn, rank 1 none: a term gathered only where it is non-zero hangs rank 0.
    ranks = two_processes["token_loss"]
    assert ranks[0]["metric"] == ranks[1]["metric"] != 0  # the mean over both ranks, logged on each
    assert all(rank["loss"] == rank["loss"] for rank in ranks)  # finite on both


@pytest.mark.slow
def test_dynamic_sampling_never_gives_two_processes_the_same_prompt(two_processes):
    # Both ranks' groups are flat and two prompts of the training set have signal: one each, never the same one.
    ranks = two_processes["both_flat"]
    assert ranks[0]["replaced"] == ranks[1]["replaced"] == [0, 1, 2, 3]
    assert ranks[0]["replacement_prompts"] != ranks[1]["replacement_prompts"]
    assert {*ranks[0]["replacement_prompts"], *ranks[1]["replacement_prompts"]} == {"vary:2", "vary:3"}


@pytest.mark.slow
def test_training_under_distributed_data_parallel_scores_with_the_shared_prompt(two_processes):
    """The loss gets the model wrapped in DistributedDataParallel: the shared-prompt forward unwraps it (its config,
    its forward's cache argument) and gives the gradient each row's own forward gives."""
    for rank in two_processes["train"]:
        assert rank["shared"]["wrapped"] == rank["separate"]["wrapped"] == "DistributedDataParallel"
        assert rank["shared_forwards"] == 1
        assert rank["shared"]["grad_norm"] == pytest.approx(rank["separate"]["grad_norm"], rel=1e-5)
        assert rank["shared"]["loss"] == pytest.approx(rank["separate"]["loss"], abs=1e-6)
    assert two_processes["train"][0] == two_processes["train"][1]  # the processes log the same step


@pytest.mark.slow
def test_lora_training_that_retrieves_and_learns_retrieved_tokens_agrees_on_both_processes(two_processes):
    """``trainer.train()`` with LoRA, an embedded store both processes read, retrieval for the failed groups only and
    the retrieved-token loss: the processes log the same steps and end with the same adapter, which trained."""
    ranks = two_processes["lora_retrieval"]
    assert ranks[0] == ranks[1]
    rank = ranks[0]
    assert rank["wrapped"] == "DistributedDataParallel"
    steps = [entry for entry in rank["log"] if "loss" in entry]
    assert len(steps) == 2 and all(math.isfinite(step["loss"]) for step in steps)
    assert any(step["rapo/retrieval_rate"] > 0 for step in steps)
    learned = [step for step in steps if step["rapo/retrieved_tokens_learned"] > 0]
    assert learned and all(step["rapo/retrieved_token_loss"] != 0 for step in learned)
    assert all(step["grad_norm"] > 0 for step in steps)
    assert all(value > 0 for value in rank["lora_b"])  # LoRA's B starts at zero: the adapter trained
