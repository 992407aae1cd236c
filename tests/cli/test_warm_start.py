"""The SFT warm start reassembles each question's best stored trajectory."""

import pytest

from rapo_trl.cli.warm_start import trajectories_from_store
from rapo_trl.embeddings import HashingEmbedder
from rapo_trl.store import TraceStore
from tests.helpers.chroma_server import free_port

GOOD = "<think>compute</think>\n<python>\nprint(6 * 7)\n</python>\n<result>\n42\n</result>\n<answer>\\boxed{42}</answer>"
BAD = "<think>guess</think>\n<python>\nprint(6 + 7)\n</python>\n<result>\n13\n</result>\n<answer>\\boxed{13}</answer>"


def test_best_trajectory_per_question_is_reassembled(tmp_path):
    store = TraceStore(tmp_path / "store", embedder=HashingEmbedder())
    store.add_trajectories([GOOD, BAD, BAD], [1.0, 0.0, 0.5], ["q1", "q1", "q2"], prompts=["six times seven"] * 3)
    found = trajectories_from_store(store, min_reward=1.0)
    assert set(found) == {"q1"}  # q2's only trajectory is below the threshold
    assert found["q1"].split() == GOOD.split()  # same text, step by step


def _store_and_rows(tmp_path):
    from datasets import Dataset

    store = TraceStore(tmp_path / "store", embedder=HashingEmbedder())
    store.add_trajectories([GOOD, GOOD], [1.0, 1.0], ["q1", "q2"], prompts=["six times seven", "seven times six"])
    rows = Dataset.from_list([
        {"prompt": [{"role": "user", "content": text}], "question_id": qid}
        for qid, text in (("q1", "six times seven"), ("q2", "seven times six"), ("q3", "not in the store"))
    ])
    return store, rows


def test_warm_start_saves_an_adapter_over_the_base_and_its_loss_curve(tiny_model_dir, tmp_path):
    import json

    from transformers import AutoTokenizer

    from rapo_trl.cli.warm_start import warm_start

    store, rows = _store_and_rows(tmp_path)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    path = warm_start(str(tiny_model_dir), tok, rows, store, str(tmp_path / "out"), steps=3, learning_rate=1e-3,
                      min_reward=1.0, use_cpu=True, seed=0, bf16=False, batch_size=2)
    folder = tmp_path / "out" / "sft-warm-start"
    history = json.loads((folder / "sft_history.json").read_text())
    assert path.endswith("sft-warm-start") and (folder / "adapter_model.safetensors").is_file()
    assert json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"] == str(tiny_model_dir)
    assert not (folder / "model.safetensors").exists()  # no merged copy of the model
    assert history["examples"] == 2  # q3 has no stored trajectory
    assert history["steps"] == 3 and [e["step"] for e in history["loss"]] == [1, 2, 3]


def test_equal_time_sft_stops_on_the_clock(tiny_model_dir, tmp_path):



    history = _equal_time_history(tmp_path, tiny_model_dir, steps=1000, max_seconds=0.0)
    assert history["steps"] == 1  # the time budget was spent after the first step, not the 1000 asked


@pytest.mark.slow
@pytest.mark.rapo_runs("train-sft", "eval-sft")
def test_sft_same_time_is_an_adapter_over_the_warm_start_and_is_evaluated(cli_runs, cli_work):
    import json
    from pathlib import Path

    from tests.cli.runs import describe

    work, _ = cli_work
    run = cli_runs["train-sft"]
    assert run.returncode == 0, describe(run)
    out = work / "model-sft"
    warm, same_time = out / "sft-warm-start", out / "sft-same-time"
    warm_adapter = json.loads((warm / "adapter_config.json").read_text())
    assert not (warm / "model.safetensors").exists()  # RAPO trains the warm start's adapter further, unmerged
    adapter = json.loads((same_time / "adapter_config.json").read_text())
    # the equal-time baseline trained the warm start's adapter further too, over the same base
    assert adapter["base_model_name_or_path"] == warm_adapter["base_model_name_or_path"]
    assert Path(adapter["base_model_name_or_path"]).resolve() != warm.resolve()
    assert (same_time / "adapter_model.safetensors").is_file() and (same_time / "sft_history.json").is_file()
    assert not (same_time / "model.safetensors").exists() and not (same_time / "config.json").exists()

    run = cli_runs["eval-sft"]
    assert run.returncode == 0, describe(run)
    printed = {line.strip().strip("|").split("|")[0].strip() for line in run.stdout.splitlines()}
    assert {"warm_start", "sft_same_time", "grpo_same_rollouts", "trained"} <= printed, describe(run)
    saved = json.loads((out / "eval_results.json").read_text())
    assert list(saved["rows"]) == ["warm_start", "sft_same_time", "grpo_same_rollouts", "trained"]
    assert saved["sft_same_time_sft"]["steps"] >= 1
    # mean@k for the model named in eval_sampled_models only, greedy pass@1 for all
    assert saved["k"] == 2 and list(saved["sets"]) == ["eval"]
    rows = saved["sets"]["eval"]["rows"]
    assert rows["trained"]["k"] == 2 and rows["trained"]["questions"] == 2 and rows["trained"]["samples"] == 4
    assert 0.0 <= rows["trained"]["mean@k"] <= 1.0
    assert rows["trained"]["temperature"] == 0.4  # eval_temperature, not the recipe's training temperature
    assert "mean@k" not in rows["warm_start"] and "pass@1" in rows["warm_start"]
    assert "mean@2 at T=0.4" in run.stdout


@pytest.mark.slow
@pytest.mark.rapo_runs("train-sft", "eval-sft")
def test_grpo_same_rollouts_trains_grpo_from_the_warm_start_and_the_report_sets_the_runs_side_by_side(
        cli_runs, cli_work):
    import json

    from tests.cli.runs import describe

    work, _ = cli_work
    run = cli_runs["train-sft"]
    assert run.returncode == 0, describe(run)
    out = work / "model-sft"
    grpo = out / "grpo-same-rollouts"
    adapter = json.loads((grpo / "adapter_config.json").read_text())
    warm_adapter = json.loads((out / "sft-warm-start" / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == warm_adapter["base_model_name_or_path"]
    # its own run: as many steps, with no hybrid rows and p = 0, where the RAPO run had hybrid rows at p = 1
    rapo_log = [e for e in json.loads((out / "trainer_state.json").read_text())["log_history"] if "reward" in e]
    grpo_log = [e for e in json.loads((grpo / "trainer_state.json").read_text())["log_history"] if "reward" in e]
    assert [e["step"] for e in grpo_log] == [e["step"] for e in rapo_log] == [1, 2]
    assert all(e["rapo/hybrid_share"] > 0 and e["rapo/retrieve_prob"] == 1.0 for e in rapo_log)
    assert all(e["rapo/hybrid_share"] == 0 and e["rapo/retrieve_prob"] == 0 for e in grpo_log)
    assert "GRPO baseline (retrieval off): trained 2 steps" in run.stdout

    run = cli_runs["eval-sft"]
    assert run.returncode == 0, describe(run)
    saved = json.loads((out / "eval_results.json").read_text())
    # the RL runs' rewards per step, read from their logs, beside the scores; the SFT ones have none
    assert set(saved["training"]) == {"grpo_same_rollouts", "trained"}
    assert saved["training"]["trained"][0]["reward"] == rapo_log[0]["reward"]
    assert saved["training"]["grpo_same_rollouts"][0]["reward"] == grpo_log[0]["reward"]
    assert saved["training"]["trained"][0]["rapo/reward_on_policy"] == rapo_log[0]["rapo/reward_on_policy"]
    assert "| step | grpo_same_rollouts: reward |" in (out / "eval_results.md").read_text()


def test_a_bf16_warm_start_reaches_rapo_whole(tiny_model_dir, tmp_path):
    # Merged into the base and loaded in bf16 (as the RL run and `rapo eval` load it), the warm
    # start's small delta was rounded away. RAPO now trains the warm start's adapter further over the bf16 base: the
    # function it starts from is the one SFT trained, its adapter fp32 and bit for bit the saved one.
    import torch
    from peft import LoraConfig
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    from rapo_trl.cli.warm_start import load_adapter_for_training, warm_start

    store, rows = _store_and_rows(tmp_path)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0)
    path = warm_start(str(tiny_model_dir), tok, rows, store, str(tmp_path / "out"), steps=2, learning_rate=1e-2,
                      min_reward=1.0, use_cpu=True, seed=0, bf16=True, batch_size=2, lora=lora)
    policy = load_adapter_for_training(str(tiny_model_dir), path, {"dtype": torch.bfloat16})
    saved = load_file(f"{path}/adapter_model.safetensors")
    trainable = {n: p for n, p in policy.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n and p.dtype == torch.float32 for n, p in trainable.items())
    assert len(trainable) == len(saved)
    for name, tensor in saved.items():
        loaded = next(p for n, p in trainable.items() if n.replace(".default", "") == name)
        assert torch.equal(loaded.detach(), tensor)
    frozen = {p.dtype for n, p in policy.named_parameters() if not p.requires_grad}
    assert frozen == {torch.bfloat16}  # the base as the run loads it; the delta never rounded into it
    # The run's lora_dropout, not the one the adapter was saved with: dropout is a training setting.
    assert {m.p for n, m in policy.named_modules() if isinstance(m, torch.nn.Dropout)} == set()  # saved with 0.0
    with_dropout = load_adapter_for_training(str(tiny_model_dir), path, {"dtype": torch.bfloat16}, lora_dropout=0.05)
    assert {m.p for n, m in with_dropout.named_modules() if isinstance(m, torch.nn.Dropout)} == {0.05}


@pytest.mark.slow
def test_under_two_processes_only_the_main_one_merges_and_saves(tiny_model_dir, tmp_path):
    """Under `accelerate launch` only the main process merges and writes the warm start's folder."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).with_name("warm_start_two_processes.py")
    root = Path(__file__).parents[2]
    # A free port, not a fixed one: under pytest-xdist another worker may be running a torchrun of its own
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
           str(script), str(tiny_model_dir), str(tmp_path)]
    env = {**__import__("os").environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=root, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["writes"] for r in ranks] == [1, 0]
    assert all(r["loadable"] for r in ranks)  # the others waited for the main process's files


def test_a_finished_warm_start_is_reused_and_a_changed_one_retrained(tiny_model_dir, tmp_path, capsys):
    import json

    from transformers import AutoTokenizer

    from rapo_trl.cli.warm_start import WARM_START_KEY_FILE, warm_start

    store, rows = _store_and_rows(tmp_path)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    common = dict(min_reward=1.0, use_cpu=True, seed=0, bf16=False, batch_size=2)
    out = tmp_path / "out"
    path = warm_start(str(tiny_model_dir), tok, rows, store, str(out), steps=2, learning_rate=1e-3, **common)
    history = out / "sft-warm-start" / "sft_history.json"
    first = history.stat().st_mtime_ns
    assert (out / "sft-warm-start" / WARM_START_KEY_FILE).is_file()
    assert warm_start(str(tiny_model_dir), tok, rows, store, str(out), steps=2, learning_rate=1e-3, **common) == path
    assert history.stat().st_mtime_ns == first and "Warm start reused" in capsys.readouterr().out
    warm_start(str(tiny_model_dir), tok, rows, store, str(out), steps=3, learning_rate=1e-3, **common)  # new recipe
    assert json.loads(history.read_text())["steps"] == 3
    store.add_trajectories([GOOD], [1.0], ["q3"], prompts=["not in the store"])  # new data: q3 now demonstrated
    warm_start(str(tiny_model_dir), tok, rows, store, str(out), steps=3, learning_rate=1e-3, **common)
    assert json.loads(history.read_text())["examples"] == 3


TARGET_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
KEY_IN_A_FRESH_PROCESS = f"""
import json, sys
from rapo_trl.cli.warm_start import warm_start_key
lora = {{"r": 16, "lora_alpha": 32, "target_modules": set({TARGET_MODULES!r})}}
print(json.dumps({{"order": list(lora["target_modules"]),
                  "key": warm_start_key(sys.argv[1], [{{"prompt": "p", "completion": "c"}}], steps=3, lora=lora)}}))
"""


def test_the_warm_start_key_is_the_same_in_processes_with_different_hash_seeds(tmp_path):
    # LoraConfig keeps target_modules as a set, whose order follows each process's string hash seed: a key that
    # wrote it as it iterates never matched in the next process, so every run trained its warm start again.
    import json
    import os
    import subprocess
    import sys

    from peft import LoraConfig

    assert isinstance(LoraConfig(target_modules=TARGET_MODULES).to_dict()["target_modules"], set)
    seen = []
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", KEY_IN_A_FRESH_PROCESS, str(tmp_path)], env=env,
                              capture_output=True, text=True, check=True)
        seen.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert len({tuple(process["order"]) for process in seen}) > 1  # the set's order did differ between them
    assert len({process["key"] for process in seen}) == 1


def test_sft_on_store_is_trained_again_when_the_warm_start_it_continues_changed(tiny_model_dir, tmp_path, capsys):
    # SFT on the store trains the warm start's adapter further (start_adapter): its cache key held that adapter's
    # path alone, so a warm start trained again (other steps, store, learning rate) left the old SFT-on-store model
    # reused, continued from a warm start that no longer exists.
    import json

    from transformers import AutoTokenizer

    from rapo_trl.cli.warm_start import SFT_ON_STORE_DIR, warm_start

    store, rows = _store_and_rows(tmp_path)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    common = dict(min_reward=1.0, use_cpu=True, seed=0, bf16=False, batch_size=2, learning_rate=1e-3)
    out = str(tmp_path / "out")
    history = tmp_path / "out" / SFT_ON_STORE_DIR / "sft_history.json"
    for warm_steps in (2, 3):
        warm = warm_start(str(tiny_model_dir), tok, rows, store, out, steps=warm_steps, **common)
        capsys.readouterr()
        warm_start(str(tiny_model_dir), tok, rows, store, out, steps=1, folder=SFT_ON_STORE_DIR, start_adapter=warm,
                   **common)
        assert "Warm start reused" not in capsys.readouterr().out, f"after a warm start of {warm_steps} steps"
        assert json.loads(history.read_text())["steps"] == 1
    # the same warm start again: both are reused
    warm = warm_start(str(tiny_model_dir), tok, rows, store, out, steps=3, **common)
    warm_start(str(tiny_model_dir), tok, rows, store, out, steps=1, folder=SFT_ON_STORE_DIR, start_adapter=warm,
               **common)
    assert capsys.readouterr().out.count("Warm start reused") == 2


def test_a_warm_start_names_the_run_that_made_or_reused_it(tiny_model_dir, tmp_path, monkeypatch, capsys):
    """rapo eval scores a warm start beside the trained model only when it names the model's run: a warm start reused
    from the folder (the same key) is what the new run would have made, so it names the new run; one made again names
    no run until it is saved."""
    import trl
    from transformers import AutoTokenizer

    from rapo_trl.cli.run_record import baseline_run_id
    from rapo_trl.cli.warm_start import warm_start

    store, rows = _store_and_rows(tmp_path)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    common = dict(min_reward=1.0, use_cpu=True, seed=0, bf16=False, batch_size=2, learning_rate=1e-3)
    out = tmp_path / "out"
    folder = warm_start(str(tiny_model_dir), tok, rows, store, str(out), steps=1, run_id="run1", **common)
    assert baseline_run_id(folder) == "run1"
    capsys.readouterr()
    monkeypatch.setenv("RANK", "1")  # a second process of a launch: the first stamps and says it
    warm_start(str(tiny_model_dir), tok, rows, store, str(out), steps=1, run_id="other", **common)
    assert baseline_run_id(folder) == "run1" and "Warm start reused" not in capsys.readouterr().out
    monkeypatch.setenv("RANK", "0")
    warm_start(str(tiny_model_dir), tok, rows, store, str(out), steps=1, run_id="run2", **common)  # reused
    assert baseline_run_id(folder) == "run2" and "Warm start reused" in capsys.readouterr().out

    class Stopped(Exception):
        pass

    def stopped(*args, **kwargs):
        raise Stopped

    monkeypatch.setattr(trl, "SFTTrainer", stopped)  # a run stopped while it makes a changed warm start again
    with pytest.raises(Stopped):
        warm_start(str(tiny_model_dir), tok, rows, store, str(out), steps=2, run_id="run3", **common)
    assert baseline_run_id(folder) is None


def _cache_commit(cache, repo_id: str, commit: str) -> None:
    """A hub cache in which ``repo_id``'s ``main`` names ``commit``, whose snapshot holds a config.json."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "snapshots" / commit / "config.json").write_text("{}")
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)


def test_a_hub_branch_that_moved_keys_a_new_warm_start(tmp_path, monkeypatch):
    # A hub id has no folder to fingerprint: keyed by its name alone, a warm start made over `main` was reused after
    # `main` moved on the hub, a LoRA trained over the old weights then trained over the new ones.
    import huggingface_hub.constants

    from rapo_trl.cli.warm_start import warm_start_key

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    examples = [{"prompt": "p", "completion": "c"}]

    def key():
        return warm_start_key("org/model", examples, steps=3, model_init_kwargs={"revision": "main"})

    _cache_commit(tmp_path / "hub", "org/model", "a" * 40)
    first = key()
    assert key() == first  # the same commit: the warm start is reused
    _cache_commit(tmp_path / "hub", "org/model", "b" * 40)  # main moved on the hub, and was downloaded
    assert key() != first
    (tmp_path / "hub" / "models--org--model" / "refs" / "main").write_text("a" * 40)  # and back
    assert key() == first


def test_a_changed_chat_template_trains_the_warm_start_again(tiny_model_dir, tmp_path, capsys):
    # The examples are chat messages that SFT renders with the tokenizer's chat template: a template edited in the
    # model's folder (its weights untouched) left the warm start trained on the old rendering reused.
    from transformers import AutoTokenizer

    from rapo_trl.cli.warm_start import warm_start

    store, rows = _store_and_rows(tmp_path)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    common = dict(min_reward=1.0, use_cpu=True, seed=0, bf16=False, batch_size=2, learning_rate=1e-3, steps=1)
    out = str(tmp_path / "out")
    warm_start(str(tiny_model_dir), tok, rows, store, out, **common)
    tok.chat_template = "Chat:\n" + tok.chat_template  # each rendered conversation now begins with a line
    capsys.readouterr()
    warm_start(str(tiny_model_dir), tok, rows, store, out, **common)
    assert "Warm start reused" not in capsys.readouterr().out


def test_a_merged_warm_start_made_where_an_adapter_was_loads_as_the_merge_alone(tiny_model_dir, tmp_path):
    # A recipe switched from LoRA to training every weight, in the same output_dir, makes its warm start again as a
    # merged model; the earlier adapter's files left beside it had transformers load that stale LoRA on top of the
    # merge (and `rapo eval` load the base with the stale LoRA alone).
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rapo_trl.cli.warm_start import warm_start

    store, rows = _store_and_rows(tmp_path)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    common = dict(min_reward=1.0, use_cpu=True, seed=0, bf16=False, batch_size=2, learning_rate=1e-2, steps=2)
    out = str(tmp_path / "out")
    warm_start(str(tiny_model_dir), tok, rows, store, out, **common)  # an adapter
    folder = warm_start(str(tiny_model_dir), tok, rows, store, out, merge=True, **common)
    assert not (tmp_path / "out" / "sft-warm-start" / "adapter_config.json").exists()
    loaded = AutoModelForCausalLM.from_pretrained(folder)
    saved = load_file(f"{folder}/model.safetensors")
    assert not any("lora_" in name for name, _ in loaded.named_parameters())
    state = loaded.state_dict()
    assert all(torch.equal(state[name], tensor) for name, tensor in saved.items())


@pytest.mark.parametrize("edited, before, after", [
    # Only *.safetensors were fingerprinted: a local model saved as pytorch_model.bin (as older transformers saved
    # them) and saved again in place with other weights kept the key, and its warm start trained over the old ones.
    ("pytorch_model.bin", b"old weights", b"other weights"),
    # The weights untouched, an edited config computes otherwise (here: another rope scaling).
    ("config.json", b'{"rope_theta": 10000}', b'{"rope_theta": 500000}'),
], ids=["pytorch_bin_weights", "config"])
def test_a_model_folder_edited_in_place_keys_a_new_warm_start(tmp_path, edited, before, after):
    import os

    from rapo_trl.cli.warm_start import warm_start_key

    (tmp_path / "config.json").write_text("{}")
    if edited != "pytorch_model.bin":
        (tmp_path / "model.safetensors").write_bytes(b"weights")
    for path in tmp_path.iterdir():
        os.utime(path, (1_000_000_000, 1_000_000_000))
    (tmp_path / edited).write_bytes(before)
    os.utime(tmp_path / edited, (1_000_000_000, 1_000_000_000))
    first = warm_start_key(str(tmp_path), [{"prompt": "p", "completion": "c"}], steps=3)
    assert warm_start_key(str(tmp_path), [{"prompt": "p", "completion": "c"}], steps=3) == first
    (tmp_path / edited).write_bytes(after)
    assert warm_start_key(str(tmp_path), [{"prompt": "p", "completion": "c"}], steps=3) != first


def test_equal_time_sft_trains_for_its_budget_counted_from_its_first_step(tiny_model_dir, tmp_path, monkeypatch):
    """RAPO's time is counted from the start of its training loop (`TrainedSeconds`), so the equal-time baseline's
    budget is spent on training steps too: loading its model and tokenizing its examples come out of neither."""
    import time

    import trl


    class SlowToLoad(trl.SFTTrainer):
        def __init__(self, *args, **kwargs):
            time.sleep(1.5)  # a model that takes longer to load than the whole budget
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(trl, "SFTTrainer", SlowToLoad)
    history = _equal_time_history(tmp_path, tiny_model_dir, steps=1, max_seconds=1.0)
    assert history["seconds"] >= 1.0 and history["steps"] > 1, history


def _equal_time_history(tmp_path, tiny_model_dir, steps: int, max_seconds: float) -> dict:
    """The SFT history of an equal-time baseline: trained for ``max_seconds`` of wall time, whatever ``steps`` asks."""
    import json

    from transformers import AutoTokenizer

    from rapo_trl.cli.warm_start import warm_start

    store, rows = _store_and_rows(tmp_path)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    warm_start(str(tiny_model_dir), tok, rows, store, str(tmp_path / "out"), steps=steps, learning_rate=1e-3,
               min_reward=1.0, use_cpu=True, seed=0, bf16=False, batch_size=2, max_seconds=max_seconds,
               folder="sft-same-time")
    return json.loads((tmp_path / "out" / "sft-same-time" / "sft_history.json").read_text())


WARM_START_SETTINGS = dict(steps=2, learning_rate=1e-3, min_reward=1.0, use_cpu=True, seed=0, bf16=False,
                           batch_size=2)


def _lora(**fields) -> dict:
    from rapo_trl.cli.warm_start import LORA

    return {"lora": {**LORA, **fields}}


def _other_tokens(call) -> None:
    """A tokenizer that splits the same text into other tokens, as an edited tokenizer.json in the model's folder
    (its weights untouched) would: the examples' questions say "seven"."""
    from tokenizers import normalizers

    call["tokenizer"].backend_tokenizer.normalizer = normalizers.Replace("seven", "7")


def _chat_template_edited(call) -> None:
    call["tokenizer"].chat_template = "Chat:\n" + call["tokenizer"].chat_template


def _with_system_prompt(call) -> None:
    call["rows"] = call["rows"].map(lambda row: {"prompt": [{"role": "system", "content": "Use tools."}, *row["prompt"]]})


def _other_trajectory(call) -> None:
    call["store"].add_trajectories([GOOD.replace("compute", "multiply")], [2.0], ["q1"], prompts=["six times seven"])


def _two_processes(call) -> None:
    call["environment"]["WORLD_SIZE"] = "2"  # accelerate launch / torchrun: twice the examples in each step


WARM_START_INPUTS = {
    "steps": {"steps": 3}, "learning_rate": {"learning_rate": 2e-3}, "batch_size": {"batch_size": 4},
    "seed": {"seed": 1}, "bf16": {"bf16": True}, "fp16": {"fp16": True}, "merge": {"merge": True},
    "lora_r": _lora(r=8), "lora_alpha": _lora(lora_alpha=16), "lora_dropout": _lora(lora_dropout=0.1),
    "lora_target_modules": _lora(target_modules=["q_proj", "v_proj"]),
    "lora_modules_to_save": _lora(modules_to_save=["lm_head"]),
    "model_init_kwargs": {"model_init_kwargs": {"attn_implementation": "eager"}},
    "retrieved_share": {"retrieved_share": 0.5}, "chat_template_kwargs": {"chat_template_kwargs": {"x": 1}},
    "min_reward": {"min_reward": 2.0},  # q1's second trajectory alone is imitated (_other_trajectory below)
    "tokenizer": _other_tokens, "chat_template": _chat_template_edited, "system_prompt": _with_system_prompt,
    "store": _other_trajectory, "processes": _two_processes,
}


@pytest.mark.parametrize("changed", list(WARM_START_INPUTS))
def test_each_input_of_the_warm_start_keys_it(changed, tiny_model_dir, tmp_path, monkeypatch):
    # A warm start is reused whenever its key matches: an input that changes its weights but not its key leaves the
    # one trained on the old input reused, silently.
    from transformers import AutoTokenizer

    from rapo_trl.cli import warm_start as module

    keys = []

    def reused(target, key):  # the key warm_start computes, and no training
        keys.append(key)
        return True

    monkeypatch.setattr(module, "cached_warm_start", reused)
    monkeypatch.delenv("WORLD_SIZE", raising=False)

    def key_of(change) -> str:
        store, rows = _store_and_rows(tmp_path / f"call{len(keys)}")
        if changed == "min_reward":
            _other_trajectory({"store": store})
        call = {"tokenizer": AutoTokenizer.from_pretrained(tiny_model_dir), "rows": rows, "store": store,
                "environment": {}, "settings": dict(WARM_START_SETTINGS)}
        if callable(change):
            change(call)
        elif change:
            call["settings"].update(change)
        for name, value in call["environment"].items():
            monkeypatch.setenv(name, value)
        module.warm_start(str(tiny_model_dir), call["tokenizer"], call["rows"], call["store"],
                          str(tmp_path / "out"), **call["settings"])
        monkeypatch.delenv("WORLD_SIZE", raising=False)
        return keys[-1]

    unchanged = key_of(None)
    assert key_of(None) == unchanged  # the same inputs: reused
    assert key_of(WARM_START_INPUTS[changed]) != unchanged
