"""`rapo train --push_to_hub` pushes as TRL does. The adapter names the base the warm start began from
(its hub id, the name given, or the folder's absolute path) and carries the warm start's LoRA, so the pushed
repo loads with `AutoPeftModelForCausalLM.from_pretrained` from any folder; the merged warm start stays home."""

from __future__ import annotations

import json
import shutil
import types
from pathlib import Path

import pytest
import torch

from rapo_trl.cli.push import base_model_name, hub_folder, push_folder
from rapo_trl.cli.warm_start import SFT_SAME_TIME_DIR, WARM_START_DIR, WARM_START_LORA


@pytest.fixture
def run_after_warm_start(tiny_model_dir, tmp_path, monkeypatch):
    """A run folder as `rapo train` leaves it after a warm start: the warm start's LoRA and merged model in
    sft-warm-start/, RAPO's LoRA (other targets and rank) over the merged model, naming it by a relative path."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "runs" / "model"
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    warm = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False))
    warm.save_pretrained(out / WARM_START_DIR / WARM_START_LORA)
    warm.merge_and_unload().save_pretrained(out / WARM_START_DIR)
    merged = AutoModelForCausalLM.from_pretrained(out / WARM_START_DIR, dtype=torch.float32)
    rapo = get_peft_model(merged, LoraConfig(r=2, lora_alpha=6, target_modules=["q_proj", "v_proj"],
                                             init_lora_weights=False))
    rapo.peft_config["default"].base_model_name_or_path = f"runs/model/{WARM_START_DIR}"  # as given: relative
    rapo.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(out)
    (out / SFT_SAME_TIME_DIR).mkdir()
    (out / SFT_SAME_TIME_DIR / "adapter_config.json").write_text("{}")
    ids = torch.tensor([[1, 5, 9, 13, 2]])
    with torch.no_grad():
        expected = rapo(input_ids=ids).logits
    return out, ids, expected


def test_pushed_adapter_loads_from_another_folder_with_the_warm_start_folded_in(run_after_warm_start, tiny_model_dir,
                                                                                tmp_path, monkeypatch):
    from peft import AutoPeftModelForCausalLM

    out, ids, expected = run_after_warm_start
    hub = hub_folder(out, tmp_path / "hub" / "me" / "my-run", base_model_name(None, str(tiny_model_dir),
                                                                              str(tiny_model_dir)))
    assert not (hub / WARM_START_DIR).exists() and not (hub / SFT_SAME_TIME_DIR).exists()  # no full copy pushed
    config = json.loads((hub / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(tiny_model_dir.resolve()) and config["r"] == 6
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with pytest.raises(Exception):  # noqa: B017, PT011 - the run's own adapter names a relative local folder
        AutoPeftModelForCausalLM.from_pretrained(out)
    model = AutoPeftModelForCausalLM.from_pretrained(hub, dtype=torch.float32)
    with torch.no_grad():
        got = model(input_ids=ids).logits
    # base + warm start + RAPO, as trained: measured 2e-7 apart (the adapter merged vs applied)
    torch.testing.assert_close(got, expected, atol=2e-6, rtol=0)


def test_the_pushed_card_describes_the_folded_adapter(run_after_warm_start, tmp_path):
    out, _, _ = run_after_warm_start
    row = "| LoRA | r=2, alpha=6, targets=['q_proj', 'v_proj'] | PEFT adapter |"
    (out / "README.md").write_text(f"## Recipe\n\n| setting | value | note |\n|---|---|---|\n{row}\n")
    hub = hub_folder(out, tmp_path / "hub", "org/base")
    card = (hub / "README.md").read_text()
    assert row not in card
    assert "| LoRA | r=6, alpha=6, targets=" in card and "the SFT warm start's LoRA (r=4) folded with RAPO's (r=2)" in card
    assert row in (out / "README.md").read_text()  # the run's own card describes what it holds


def test_the_warm_start_is_pushed_only_when_asked(run_after_warm_start, tmp_path):
    out, _, _ = run_after_warm_start
    hub = hub_folder(out, tmp_path / "hub", "org/base", include_warm_start=True)
    assert (hub / WARM_START_DIR / "config.json").is_file()
    assert json.loads((hub / "adapter_config.json").read_text())["base_model_name_or_path"] == "org/base"


def test_an_earlier_runs_checkpoints_set_aside_are_not_pushed(run_after_warm_start, tmp_path):
    out, _, _ = run_after_warm_start
    aside = Path(out) / "earlier-run-20260101-000000" / "checkpoint-3"
    aside.mkdir(parents=True)
    (aside / "trainer_state.json").write_text("{}")
    try:
        hub = hub_folder(out, tmp_path / "hub", "org/base")
    finally:
        shutil.rmtree(aside.parent)
    assert not list(hub.glob("earlier-run-*")) and (hub / "adapter_config.json").is_file()


def test_the_base_is_named_by_the_flag_else_the_hub_id_else_the_folder(tiny_model_dir):
    assert base_model_name("org/my-base", str(tiny_model_dir), str(tiny_model_dir)) == "org/my-base"
    assert base_model_name(None, "Qwen/Qwen2.5-0.5B-Instruct", "/cache/qwen") == "Qwen/Qwen2.5-0.5B-Instruct"
    assert base_model_name(None, "smollm2", "/cache/smollm2") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert base_model_name(None, str(tiny_model_dir), str(tiny_model_dir)) == str(tiny_model_dir.resolve())


def test_push_uploads_the_folder_to_the_repo(tmp_path):
    calls = []
    api = types.SimpleNamespace(
        create_repo=lambda repo_id, **kwargs: calls.append(("create", repo_id, kwargs))
        or types.SimpleNamespace(repo_id=f"me/{repo_id}"),
        upload_folder=lambda **kwargs: calls.append(("upload", kwargs)),
    )
    assert push_folder(tmp_path, "my-run", token="t", private=True, api=api) == "me/my-run"
    assert calls[0] == ("create", "my-run", {"token": "t", "private": True, "exist_ok": True})
    assert calls[1][1]["repo_id"] == "me/my-run" and calls[1][1]["folder_path"] == str(tmp_path)
