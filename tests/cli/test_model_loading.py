"""The model a recipe asks for is the model each command loads: TRL's ModelConfig flags reach
``from_pretrained``, a hub id in the local cache loads offline, and no model loads before the inputs are checked.

Loads are recorded at ``from_pretrained`` (``AutoModelForCausalLM``'s, which eval and build-store call, and
``PreTrainedModel``'s, which every model class inherits and TRL calls) and stopped there: what matters is what
the command asked for, not the weights.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

from tests.cli.conftest import recipe, write_yaml
from tests.cli.runs import describe, rapo_env
from tests.helpers.hardware import fresh_hardware_probes, no_gpu  # noqa: F401

FLAGS = {"dtype": "bfloat16", "attn_implementation": "eager", "model_revision": "v1.0", "trust_remote_code": True}
EXPECTED = {"dtype": torch.bfloat16, "attn_implementation": "eager", "revision": "v1.0", "trust_remote_code": True}


class Stop(Exception):
    """Raised by the recorder once a model load was asked for."""


@pytest.fixture
def loads(monkeypatch):
    """The keyword arguments of each model load; the load itself is stopped."""
    asked = []

    def recording(cls, path, *args, **kwargs):
        asked.append(kwargs)
        raise Stop

    for loader in (PreTrainedModel, AutoModelForCausalLM):
        monkeypatch.setattr(loader, "from_pretrained", classmethod(recording))
    return asked


def command_recipe(command: str, tiny_model_dir, tmp_path, **changes) -> list[str]:
    """``rapo COMMAND``'s arguments: the tiny recipe, with the model as that command's model, and ``changes``."""
    config = {**recipe(tiny_model_dir, tmp_path), "retrieve_prob": 0.0, **changes}
    if command == "eval":
        config["eval_model"] = str(tiny_model_dir)
    if command == "build-store":
        config["agent"] = str(tiny_model_dir)
    return ["--config", str(write_yaml(tmp_path / f"{command}.yaml", config))]


def run_command(command: str, argv: list[str]):
    from rapo_trl.cli import build_store, evaluate, parse_recipe, train

    module = {"train": train, "eval": evaluate, "build-store": build_store}[command]
    return module.run(*parse_recipe(command, argv))


@pytest.mark.parametrize("command", ["train", "eval", "build-store"])
def test_model_config_flags_reach_from_pretrained(command, loads, tiny_model_dir, tmp_path, monkeypatch):
    no_gpu(monkeypatch)
    with pytest.raises(Stop):
        run_command(command, command_recipe(command, tiny_model_dir, tmp_path, **FLAGS))
    asked = loads[0]
    # model_revision pins the policy's repo; build-store's agent is another repo and loads at its default.
    expected = {**EXPECTED, "revision": None} if command == "build-store" else EXPECTED
    assert {key: asked.get(key) for key in EXPECTED} == expected


@pytest.mark.parametrize("command", ["train", "eval", "build-store"])
def test_unset_dtype_keeps_each_commands_default(command, loads, tiny_model_dir, tmp_path, monkeypatch):
    """Without `dtype`, train loads as TRL does (float32) and eval/build-store follow the hardware (the CPU here)."""
    no_gpu(monkeypatch)
    with pytest.raises(Stop):
        run_command(command, command_recipe(command, tiny_model_dir, tmp_path))
    assert loads[0]["dtype"] == torch.float32


def test_unset_dtype_follows_the_gpu_in_eval(loads, tiny_model_dir, tmp_path, monkeypatch):
    """ModelConfig's own default (float32) must not reach eval: on a GPU it loads in the GPU's precision."""
    from tests.helpers.hardware import fake_gpu

    fake_gpu(monkeypatch, native_bf16=True)
    with pytest.raises(Stop):
        run_command("eval", command_recipe("eval", tiny_model_dir, tmp_path) + ["--use_cpu", "true"])
    assert (loads[0]["device_map"], loads[0]["dtype"]) == ("cuda", torch.bfloat16)


@pytest.mark.parametrize("flag", ["load_in_4bit", "load_in_8bit"])
@pytest.mark.parametrize("command", ["train", "eval", "build-store"])
def test_k_bit_flags_pass_a_quantization_config(command, flag, loads, tiny_model_dir, tmp_path, monkeypatch):
    """QLoRA from the command line: TRL's BitsAndBytesConfig, built from the flags, reaches the load."""
    from rapo_trl.cli import build_store, evaluate, train

    no_gpu(monkeypatch)
    for module in (train, evaluate, build_store):  # bitsandbytes itself is not needed to build the config
        monkeypatch.setattr(module, "check_quantization", lambda model_args: None)
    argv = command_recipe(command, tiny_model_dir, tmp_path, **{flag: True}, dtype="bfloat16",
                          bnb_4bit_quant_type="nf4")
    with pytest.raises(Stop):
        run_command(command, argv)
    config = loads[0]["quantization_config"]
    if flag == "load_in_8bit":
        assert config.load_in_8bit and not config.load_in_4bit
    else:
        assert config.load_in_4bit and config.bnb_4bit_quant_type == "nf4"
        assert config.bnb_4bit_compute_dtype == torch.bfloat16


@pytest.mark.skipif(bool(__import__("importlib").util.find_spec("bitsandbytes")), reason="bitsandbytes is installed")
@pytest.mark.parametrize("flag", ["--load_in_4bit", "--load_in_8bit"])
def test_k_bit_without_bitsandbytes_is_one_line_before_any_load(flag, loads, tiny_model_dir, tmp_path, capsys):
    from rapo_trl.cli import main

    code = main(["train", *command_recipe("train", tiny_model_dir, tmp_path), flag])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and not loads, lines
    assert "bitsandbytes" in lines[0] and "pip install bitsandbytes" in lines[0], lines[0]


def test_missing_store_is_reported_before_the_model_is_converted(tiny_model_dir, tmp_path, monkeypatch, capsys):
    """The SmolLM2 alias costs a minute of GGUF conversion: a missing store must not wait for it."""
    import transformers

    import rapo_trl.models
    from rapo_trl.cli import main, train

    def loaded(*args, **kwargs):
        raise AssertionError("a model loaded before the missing store was reported")

    for owner, name in ((rapo_trl.models, "smollm2_path"), (rapo_trl.models, "build_tiny_model"),
                        (transformers.AutoTokenizer, "from_pretrained"),
                        (transformers.AutoModelForCausalLM, "from_pretrained"), (PreTrainedModel, "from_pretrained")):
        monkeypatch.setattr(owner, name, loaded)
    argv = command_recipe("train", tiny_model_dir, tmp_path, model_name_or_path="smollm2", retrieve_prob=0.5,
                          store_path=str(tmp_path / "no-store"))
    assert main(["train", *argv]) == 2
    err = capsys.readouterr().err
    assert "store path" in err and "does not exist" in err and "loaded before" not in err, err
    # train.run itself (the library path, past the command line's early checks) checks first too
    from rapo_trl.cli import parse_recipe
    from rapo_trl.cli.common import UsageError

    with pytest.raises(UsageError, match="store path .* does not exist"):
        train.run(*parse_recipe("train", argv))


def _cache_hub_model(tiny_model_dir, cache, repo_id: str, revision: str = "0" * 40):
    """``repo_id`` laid out in a Hugging Face hub cache as a download leaves it (snapshot + refs/main)."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    shutil.copytree(tiny_model_dir, repo / "snapshots" / revision)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)


def test_cached_hub_id_loads_offline(tiny_model_dir, tmp_path):
    """A hub id in the local cache is what transformers loads offline; the CLI takes it too (here: as the
    build-store agent, through the whole command) and refuses an id that is not cached, in one line."""
    cache = tmp_path / "hub"
    _cache_hub_model(tiny_model_dir, cache, "rapo-test/tiny-qwen2")
    env = {**rapo_env(), "HF_HUB_CACHE": str(cache), "HF_HOME": str(tmp_path / "hf-home")}
    config = {**recipe(tiny_model_dir, tmp_path), "agent": "rapo-test/tiny-qwen2", "train_size": 1, "num_samples": 1,
              "max_completion_length": 8, "max_turn_tokens": 8, "device": "cpu"}
    path = write_yaml(tmp_path / "hub.yaml", config)
    # The policy's revision (v1.2, which the cache lacks) is not asked of the agent's repo: the agent loads.
    run = subprocess.run([sys.executable, "-m", "rapo_trl.cli", "build-store", "--config", str(path),
                          "--model_revision", "v1.2"], env=env, capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    # The untrained agent loaded and sampled to the end of the command; it writes no tagged step, which the build
    # refuses to leave as an empty store.
    sampled = "the store got no step records from agent 'rapo-test/tiny-qwen2' on 1 questions"
    assert run.returncode == 2 and "Added 0 step records" in run.stdout and sampled in run.stderr, describe(run)
    missing = subprocess.run([sys.executable, "-m", "rapo_trl.cli", "build-store", "--config", str(path),
                              "--agent", "rapo-test/not-cached"], env=env, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2, describe(missing)
    assert "'rapo-test/not-cached' is neither a local folder nor in the Hugging Face cache" in missing.stderr
