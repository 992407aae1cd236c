"""Runs a notebook top to bottom for the GPU check (scripts/gpu/step.sh d) and writes what it printed.

    python run_notebook.py NOTEBOOK OUT_STEM    # -> OUT_STEM.txt (each cell's source head and output), OUT_STEM.ipynb

Under a real Jupyter kernel (nbclient + ipykernel) when they import, else each code cell is exec'd in one namespace
in this process (IPython.display stubbed to print). The model is RAPO_NOTEBOOK_MODEL, else SmolLM2 from the landed
package: the notebook's GPU default, Qwen2.5-0.5B-Instruct, needs the Hub, which the device machine cannot reach."""

import contextlib
import io
import json
import os
import re
import sys
import time
import traceback
import types
from pathlib import Path

path, stem = Path(sys.argv[1]), Path(sys.argv[2])
if "RAPO_NOTEBOOK_MODEL" not in os.environ:
    from rapo_trl.models import smollm2_path

    os.environ["RAPO_NOTEBOOK_MODEL"] = str(smollm2_path())
lines, failed = [], False


def say(text: str) -> None:
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # a kernel's tracebacks come coloured
    print(text, flush=True)
    lines.append(text)


started = time.perf_counter()
try:
    import nbclient
    import nbformat
except ImportError as error:
    nbclient = None
    say(f"no Jupyter kernel here ({error}): exec'ing the cells in-process")
if nbclient is not None:
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(Path.cwd())}})
    try:
        client.execute()
    except Exception as error:  # CellExecutionError carries the traceback; the outputs so far are kept
        failed = True
        say(f"notebook stopped: {type(error).__name__}: {str(error)[-3000:]}")
    nbformat.write(nb, stem.with_suffix(".ipynb"))
    for index, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        source = cell.source.splitlines()
        say(f"\n=== cell {index + 1}: {source[0] if source else ''}")
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                say(output.get("text", "").rstrip())
            elif "data" in output:
                data = output["data"]
                say(data.get("text/plain", "") + (" [image/png]" if "image/png" in data else ""))
            elif output.get("output_type") == "error":
                say(f"{output.get('ename')}: {output.get('evalue')}")
else:
    display = types.ModuleType("IPython.display")
    display.Image = lambda filename=None, **_: f"<image {filename}>"
    display.display = lambda *objects: say(" ".join(map(str, objects)))
    sys.modules.setdefault("IPython", types.ModuleType("IPython"))
    sys.modules["IPython.display"] = display
    namespace = {"__name__": "__main__"}
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    for index, cell in enumerate(cells, 1):
        source = "".join(cell["source"])
        say(f"\n=== cell {index}: {source.splitlines()[0] if source else ''}")
        buffer = io.StringIO()
        try:
            with contextlib.redirect_stdout(buffer):
                exec(compile(source, f"cell-{index}", "exec"), namespace)
        except Exception:
            failed = True
            say(buffer.getvalue() + traceback.format_exc())
            break
        say(buffer.getvalue().rstrip())
say(f"\nnotebook {path.name}: {'stopped at a failing cell' if failed else 'all cells ran'} in "
    f"{time.perf_counter() - started:.0f} s")
stem.with_suffix(".txt").write_text("\n".join(lines) + "\n")
sys.exit(1 if failed else 0)
