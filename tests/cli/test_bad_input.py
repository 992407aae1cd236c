"""Bad input to the real command line: exit code != 0 and one line on stderr that names what to fix.

The command lines are in conftest.bad_input_runs; this table says what each must print.
"""

from __future__ import annotations

import pytest

from tests.cli.runs import describe

pytestmark = pytest.mark.slow

CASES = {
    # name: (stderr prefix, words the line must contain)
    "unknown_key": ("rapo train: error:", ["unknown key 'lora_rank'", "spelling"]),
    "wrong_type": ("rapo train: error:", ["'max_steps'", "'ten'", "wrong type", "expected int"]),
    "override_type": ("rapo train: error:", ["--max_steps", "invalid int value: 'ten'", "rapo train --help"]),
    "jsonl_columns": ("rapo train: error:", ["qa.jsonl", "'question'", "'answer'", "problem, solution",
                                             "question_column", "answer_column"]),
    "missing_store": ("rapo train: error:", ["store path", "no-store", "does not exist", "rapo build-store"]),
    "missing_model": ("rapo train: error:", ["model path", "no-model", "does not exist"]),
    "missing_config": ("rapo train: error:", ["cannot read config", "no-such-recipe.yaml", "No such file"]),
    "config_without_path": ("rapo eval: error:", ["--config needs the path of a YAML file"]),
    "config_not_yaml": ("rapo build-store: error:", ["broken.yaml", "not valid YAML"]),
    "store_stats_missing": ("rapo store: error:", ["store path", "no-store", "does not exist"]),
}


@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.rapo_runs(name)) for name in CASES])
def test_bad_input_fails_with_one_clear_line(cli_runs, name):
    prefix, words = CASES[name]
    run = cli_runs[name]
    assert run.returncode != 0, describe(run)
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, describe(run)
    assert lines[0].startswith(prefix), describe(run)
    for word in words:
        assert word in lines[0], f"{word!r} not in {lines[0]!r}"
    assert "Traceback" not in run.stderr + run.stdout
