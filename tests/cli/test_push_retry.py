"""`--push_to_hub` is checked before training (the Hub reachable, a token to push with), and `rapo push RUN` pushes a
trained run as `rapo train` would, e.g. again after its push failed."""

from __future__ import annotations

import json
import shutil
import types
from pathlib import Path

import pytest

from rapo_trl.cli import main, read_recipe, train
from rapo_trl.cli.common import UsageError
from rapo_trl.cli.push import push_run
from rapo_trl.cli.run_record import write_run_record


def _train_check(*argv):
    train.check(*read_recipe("train", ["--task", "arithmetic", "--model_name_or_path", "tiny", "--retrieve_prob", "0",
                                       "--push_to_hub", *argv]))


def test_push_to_hub_offline_is_refused_before_training(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UsageError, match="push_to_hub needs the Hub, but HF_HUB_OFFLINE is set"):
        _train_check()


def test_push_to_hub_without_a_token_is_refused_before_training(monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # read when huggingface_hub was imported
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no saved login
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with pytest.raises(UsageError, match=r"push_to_hub needs a Hugging Face token: run `hf auth login`"):
        _train_check()
    _train_check("--hub_token", "hf_given")  # a token given: nothing to refuse


def _hub():
    """Records what would be uploaded (the Hub is not reachable from the tests)."""
    uploaded = {}

    def upload_folder(**kwargs):
        folder = Path(kwargs["folder_path"])
        uploaded.update(kwargs, files=sorted(p.name for p in folder.iterdir()),
                        config=json.loads((folder / "config.json").read_text()))

    api = types.SimpleNamespace(create_repo=lambda repo_id, **kw: types.SimpleNamespace(repo_id=f"me/{repo_id}"),
                                upload_folder=upload_folder)
    return api, uploaded


def test_push_run_uploads_the_run_as_train_would(tiny_model_dir, tmp_path):
    run = tmp_path / "runs" / "my-model"
    shutil.copytree(tiny_model_dir, run)
    (run / "checkpoint-1").mkdir()  # checkpoints stay home
    write_run_record(str(run), ["python"], "tags", None, "arithmetic", base_model="org/base")
    api, uploaded = _hub()
    assert push_run(run, api=api) == ("me/my-model", "org/base")
    assert "checkpoint-1" not in uploaded["files"] and "config.json" in uploaded["files"]
    assert uploaded["commit_message"] == "End of training"


def test_rapo_push_refuses_a_folder_that_is_no_run_and_the_hub_offline(tmp_path, capsys, monkeypatch):
    assert main(["push", str(tmp_path)]) == 2
    assert "is no trained run (no config.json or adapter_config.json)" in capsys.readouterr().err
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").touch()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["push", str(tmp_path)]) == 2
    assert "push_to_hub needs the Hub, but HF_HUB_OFFLINE is set" in capsys.readouterr().err


def test_the_pushed_cards_quick_start_loads_the_repo_it_was_pushed_to(tiny_model_dir, tmp_path):
    """The card names the run's folder when it is written; pushed under the user's namespace or to another repo, its
    quick start loads that repo (the run's own card is left as it is)."""
    from tests.helpers.trainers import rapo_trainer

    run = tmp_path / "my-run"
    rapo_trainer(tiny_model_dir, run).save_model()
    remote = tmp_path / "remote"
    api = types.SimpleNamespace(
        create_repo=lambda repo_id, **kw: types.SimpleNamespace(repo_id=repo_id if "/" in repo_id else f"me/{repo_id}"),
        upload_folder=lambda **kw: shutil.copytree(kw["folder_path"], remote, dirs_exist_ok=True))
    for target, repo in ((None, "me/my-run"), ("org/renamed", "org/renamed")):
        assert push_run(run, target, api=api)[0] == repo
        assert f'RolloutAgent.from_pretrained("{repo}"' in (remote / "README.md").read_text()
    assert 'RolloutAgent.from_pretrained("my-run"' in (run / "README.md").read_text()


def test_a_repo_the_hub_would_reject_is_refused_before_training(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # checked first: the repo's name needs no network
    with pytest.raises(UsageError, match=r"hub_model_id is no Hub model repo: .*'me/a/b'"):
        _train_check("--hub_model_id", "me/a/b")
    (tmp_path / "config.json").write_text("{}")
    assert main(["push", str(tmp_path), "--hub_model_id", "not valid"]) == 2
    assert "hub_model_id is no Hub model repo" in capsys.readouterr().err
    run = tmp_path / "my run"  # the default repo: the folder's name
    run.mkdir()
    (run / "config.json").write_text("{}")
    assert main(["push", str(run)]) == 2
    assert "the run folder's name (the default hub_model_id) 'my run' is no Hub model repo" in capsys.readouterr().err


def _lora_run(tiny_model_dir, run: Path, trained_base: str | None) -> Path:
    """A LoRA run folder as `rapo train` saves it: the adapter and the card, which names ``trained_base`` (None: a
    local base, no Hub id)."""
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rapo_trl.config import RAPOConfig
    from rapo_trl.trainer import RAPOTrainer
    from tests.helpers.fakes import EchoTool
    from tests.helpers.trainers import common_args, dataset, sevens

    trainer = RAPOTrainer(AutoModelForCausalLM.from_pretrained(tiny_model_dir), sevens,
                          args=RAPOConfig(**common_args(run)), train_dataset=dataset(),
                          processing_class=AutoTokenizer.from_pretrained(tiny_model_dir), tools=[EchoTool()],
                          peft_config=LoraConfig(r=2, target_modules=["q_proj"]))
    trainer.base_model_id = trained_base
    trainer.save_model()
    return run


@pytest.mark.parametrize("trained_base", [None, "org/trained-base"])
def test_the_pushed_card_names_the_base_the_pushed_adapter_names(tiny_model_dir, tmp_path, trained_base):
    """`rapo push --base_model_name X` makes the adapter name X; the card written at training time named another
    base (or none), and the Hub reads the base from the card: the pushed card names X too."""
    from huggingface_hub import ModelCard

    run = _lora_run(tiny_model_dir, tmp_path / "my-run", trained_base)
    remote = tmp_path / "remote"
    api = types.SimpleNamespace(create_repo=lambda repo_id, **kw: types.SimpleNamespace(repo_id=repo_id),
                                upload_folder=lambda **kw: shutil.copytree(kw["folder_path"], remote))
    assert push_run(run, "me/pushed", "org/given-base", api=api) == ("me/pushed", "org/given-base")
    assert json.loads((remote / "adapter_config.json").read_text())["base_model_name_or_path"] == "org/given-base"
    card = ModelCard.load(remote / "README.md")
    assert card.data.base_model == "org/given-base"
    assert "fine-tuned version of [org/given-base](https://huggingface.co/org/given-base)" in card.text
    assert "no Hub id" not in card.text and "trained-base" not in card.text


@pytest.mark.parametrize("kept", ["config.json", "adapter_config.json"])
def test_a_run_folder_without_its_weights_is_refused_before_anything_is_uploaded(tiny_model_dir, tmp_path, capsys,
                                                                                 monkeypatch, kept):
    """A folder whose save stopped after the config (or one copied without its weights) is refused in one line:
    pushed, the repo would hold a config that loads no model."""
    run = tmp_path / "my-run"
    run.mkdir()
    shutil.copy(tiny_model_dir / "config.json", run / kept)
    api, uploaded = _hub()
    with pytest.raises(UsageError, match=rf"my-run has {kept} but no weights .* nothing was pushed"):
        push_run(run, api=api)
    assert uploaded == {}
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # refused before the Hub is asked for
    assert main(["push", str(run)]) == 2
    assert "no weights" in capsys.readouterr().err


def test_a_sharded_model_missing_a_shard_is_refused(tiny_model_dir, tmp_path):
    run = tmp_path / "my-run"
    shutil.copytree(tiny_model_dir, run)
    (run / "model.safetensors").rename(run / "model-00001-of-00002.safetensors")
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (run / "model.safetensors.index.json").write_text(json.dumps(index))
    api, uploaded = _hub()
    with pytest.raises(UsageError, match="model-00002-of-00002.safetensors"):
        push_run(run, api=api)
    assert uploaded == {}


def test_the_pushed_card_of_a_full_fine_tune_names_the_base_given(tiny_model_dir, tmp_path):
    """`rapo push --base_model_name X` names the card's base for a full fine-tune too (no adapter to name it in):
    its card, written at training time, names a local model with no Hub id."""
    from huggingface_hub import ModelCard

    from tests.helpers.trainers import rapo_trainer

    run = tmp_path / "my-run"
    rapo_trainer(tiny_model_dir, run).save_model()
    assert "no Hub id" in (run / "README.md").read_text()
    remote = tmp_path / "remote"
    api = types.SimpleNamespace(create_repo=lambda repo_id, **kw: types.SimpleNamespace(repo_id=repo_id),
                                upload_folder=lambda **kw: shutil.copytree(kw["folder_path"], remote))
    assert push_run(run, "me/pushed", "org/given-base", api=api) == ("me/pushed", "org/given-base")
    card = ModelCard.load(remote / "README.md")
    assert card.data.base_model == "org/given-base"
    assert "fine-tuned version of [org/given-base](https://huggingface.co/org/given-base)" in card.text
    assert "no Hub id" in (run / "README.md").read_text()  # the run's own card is left as it is
