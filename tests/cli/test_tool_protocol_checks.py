"""``rapo train`` refuses a ``tool_protocol`` its tools cannot run under in its early checks, as RAPOTrainer would
refuse it once built: after a warm start had trained for minutes."""

from __future__ import annotations

import json

import pytest

from rapo_trl.cli import parse_recipe, train
from rapo_trl.cli.common import build_tools
from rapo_trl.cli.environment import check_tool_protocol
from rapo_trl.cli.errors import UsageError
from rapo_trl.trainer.tool_protocol import resolve_tool_protocol
from tests.helpers.environments import Counter

ENVIRONMENT = ["--environment_factory", "tests.helpers.environments.Counter"]


def _recipe(tmp_path, *flags):
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps({"question": f"Count to {i}.", "answer": str(i)}) + "\n" for i in range(8)))
    return parse_recipe("train", ["--task", "dataset", "--dataset_path", str(data), "--store_path",
                                  str(tmp_path / "store"), "--output_dir", str(tmp_path / "model"),
                                  "--model_name_or_path", "tiny", *flags])


def _trainer_decides(script, rapo_args):
    """What RAPOTrainer makes of the tools the command would give it."""
    tools = build_tools(script) if script.tools is not None or script.environment_factory is None else []
    factory = Counter if script.environment_factory else None
    return resolve_tool_protocol(rapo_args.tool_protocol, tools, factory, None)


@pytest.mark.parametrize(("flags", "message"), [
    (["--tool_protocol", "json"], "tool_protocol json calls plain typed functions .* \\(python\\) run as <tag> calls"),
    ([*ENVIRONMENT, "--tool_protocol", "tags"], "needs tool_protocol json or auto, not tags"),
    ([*ENVIRONMENT, "--tools", "python"], "which one rollout cannot mix: drop tools"),
])
def test_train_refuses_before_anything_loads_what_the_trainer_would_refuse(tmp_path, flags, message):
    script, rapo_args, model_args = _recipe(tmp_path, *flags)
    with pytest.raises(ValueError):
        _trainer_decides(script, rapo_args)
    with pytest.raises(UsageError, match=message):
        train.check(script, rapo_args, model_args)


@pytest.mark.parametrize(("flags", "protocol"), [
    ([], "tags"),
    (["--tool_protocol", "tags"], "tags"),
    (ENVIRONMENT, "json"),
    ([*ENVIRONMENT, "--tool_protocol", "json"], "json"),
])
def test_what_the_trainer_runs_passes(tmp_path, flags, protocol):
    script, rapo_args, _ = _recipe(tmp_path, *flags)
    assert _trainer_decides(script, rapo_args) == protocol
    check_tool_protocol(script, rapo_args.tool_protocol)
