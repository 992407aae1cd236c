"""The Colab quickstart runs top to bottom under a real Jupyter kernel (tiny model, one step), and is
committed without outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_public_api import notebook_code, rapo_trl_imports

NOTEBOOK = Path(__file__).parent.parent / "notebooks" / "quickstart.ipynb"


def _code_cells(nb):
    return [cell for cell in nb.cells if cell.cell_type == "code"]


def _text(cell) -> str:
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            parts.append(output.get("text", ""))
        elif "data" in output:
            parts.append(output["data"].get("text/plain", ""))
    return "".join(parts)


def test_notebook_is_committed_without_outputs_and_uses_public_api_only():
    nb = json.loads(NOTEBOOK.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None, "strip the outputs before committing"
    source = "".join("".join(cell["source"]) for cell in nb["cells"])
    assert "rapo_trl.cli" not in source  # what a notebook needs is public API
    assert "HF_HUB_OFFLINE\"] =" not in source and "setdefault(\"HF_HUB_OFFLINE\"" not in source
    # ... imported from the top level, where rapo_trl exports it (tests/test_public_api.py checks it resolves)
    imports = rapo_trl_imports(notebook_code())
    assert ("rapo_trl", "RAPOTrainer") in imports
    assert {module for module, _ in imports} == {"rapo_trl"}, imports



def test_notebook_rows_teach_the_tools_its_trainer_runs():
    """Rows built without tools= would promise <search> to a trainer that runs python only."""
    source = notebook_code()
    assert source.count("to_rapo_rows(") == source.count("tools=tools)") == 2
    assert "tools=tools," in source and "evaluation, tools," in source  # the trainer and the evaluation run them


def _run_install_cell(monkeypatch, cwd):
    """Runs the notebook's install cell as if rapo_trl were missing; returns the pip commands it ran."""
    import importlib.util
    import subprocess

    nb = json.loads(NOTEBOOK.read_text())
    cell = "".join(next(c for c in nb["cells"] if c["cell_type"] == "code")["source"])
    assert "pip" in cell
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "rapo_trl" else find_spec(name, *a))
    calls = []
    monkeypatch.setattr(subprocess, "check_call", lambda cmd, *a, **k: calls.append(cmd))
    monkeypatch.chdir(cwd)
    exec(compile(cell, "install-cell", "exec"), {})
    return calls


def test_install_cell_installs_an_uploaded_wheel_and_never_a_name_pypi_lacks(tmp_path, monkeypatch):
    # rapo_trl is not on PyPI: without a wheel the cell stops with one message saying how to get one.
    with pytest.raises(RuntimeError, match=r"python -m build.*dist/rapo_trl-\*\.whl.*Files pane") as err:
        _run_install_cell(monkeypatch, tmp_path)
    assert "PyPI" in str(err.value)
    (tmp_path / "rapo_trl-0.1.0-py3-none-any.whl").write_bytes(b"")
    calls = _run_install_cell(monkeypatch, tmp_path)
    assert len(calls) == 1 and calls[0][-1] == "rapo_trl-0.1.0-py3-none-any.whl"


@pytest.mark.slow
def test_quickstart_runs_under_a_kernel(tiny_model_dir, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("RAPO_NOTEBOOK_MODEL", str(tiny_model_dir))
    monkeypatch.setenv("RAPO_NOTEBOOK_STEPS", "1")
    monkeypatch.setenv("RAPO_NOTEBOOK_EVAL", "4")
    monkeypatch.setenv("RAPO_NOTEBOOK_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no saved token: the push cell must skip
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")

    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=240, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()

    cells = _code_cells(nb)
    out = "\n".join(_text(cell) for cell in cells)
    from rapo_trl.hardware import default_precision

    bf16 = default_precision("cpu") == "bf16"  # the rule: bf16 on a CPU with AVX512-BF16/AMX, else fp32
    assert f"CPU; bf16={bf16} fp16=False" in out
    assert "the training prompts teach" not in out  # the prompt teaches the tools the trainer runs
    assert "step records from" in out
    model = tmp_path / "run" / "model"
    assert (model / "adapter_config.json").is_file() and (model / "trainer_state.json").is_file()
    card = (model / "README.md").read_text()
    assert "2603.03078" in card and "## RAPO recipe" in card
    table = next(_text(cell) for cell in cells if "pass@1" in _text(cell) and "trained" in _text(cell))
    assert "base" in table and "format_ok" in table
    assert (model / "plots" / "summary.png").is_file()
    assert any("image/png" in output.get("data", {}) for cell in cells for output in cell.get("outputs", []))
    assert "Not logged in to the Hugging Face Hub" in _text(cells[-1])
