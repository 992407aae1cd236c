"""The Colab quickstart runs top to bottom (on the tiny model, one step)."""

import json
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).parent.parent / "notebooks" / "quickstart.ipynb"


@pytest.mark.slow
def test_quickstart_notebook_runs_top_to_bottom(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("RAPO_NOTEBOOK_MODEL", str(tiny_model_dir))
    monkeypatch.setenv("RAPO_NOTEBOOK_STEPS", "1")
    monkeypatch.setenv("RAPO_NOTEBOOK_DIR", str(tmp_path))
    cells = [c for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code"]
    namespace: dict = {}
    for cell in cells:
        exec(compile("".join(cell["source"]), str(NOTEBOOK), "exec"), namespace)  # noqa: S102
    assert namespace["store"].stats()["records"] > 0
    assert set(namespace["results"]) == {"base", "trained"}
    assert (tmp_path / "model" / "adapter_config.json").exists()
