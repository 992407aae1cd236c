"""The SFT stages of ``rapo train`` imitate the store's steps as tag-protocol text: each trajectory one assistant
message, its tool results written as ``<result>`` blocks, the prompt without tool schemas. RL on an environment renders
the same conversation in the chat template's JSON format (tool schemas in the system turn, each call its own turn, each
result a tool message), in TRL's training template where the tokenizer's own is not prefix-preserving. Such examples
would teach a format RL never shows, so ``rapo train`` refuses them with an environment before anything loads."""

from __future__ import annotations

import json

import pytest

from rapo_trl.cli import parse_recipe, train
from rapo_trl.cli.environment import check_environment
from rapo_trl.cli.errors import UsageError

ENVIRONMENT = ["--environment_factory", "tests.helpers.environments.Counter"]


def _recipe(tmp_path, command, *flags):
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps({"question": f"Count to {i}.", "answer": str(i)}) + "\n" for i in range(8)))
    return parse_recipe(command, ["--task", "dataset", "--dataset_path", str(data), "--store_path",
                                  str(tmp_path / "store"), "--output_dir", str(tmp_path / "model"),
                                  "--model_name_or_path", "tiny", *flags])


@pytest.mark.parametrize("stage", ["sft_warmup_steps", "sft_store_steps"])
def test_train_on_an_environment_refuses_each_sft_stage(tmp_path, stage):
    with pytest.raises(UsageError, match=f"{stage} imitates .* environment_factory \\(set {stage} 0\\)"):
        train.check(*_recipe(tmp_path, "train", *ENVIRONMENT, f"--{stage}", "1"))


def test_train_on_an_environment_without_sft_and_sft_without_one_pass(tmp_path):
    check_environment(_recipe(tmp_path, "train", *ENVIRONMENT)[0], "train")
    check_environment(_recipe(tmp_path, "train", "--sft_store_steps", "1")[0], "train")
