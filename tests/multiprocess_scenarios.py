"""Run by tests/test_multiprocess.py under `torchrun --nproc_per_node 2`: several scenarios, one after another, in
the same two processes, so that torch, transformers and TRL are imported once for all of them. Its arguments are the
model folder and a JSON list of scenarios, each ``[script, out_dir, *extra]``: ``tests/<script>.py``'s
``main(model_dir, out_dir, *extra)`` runs and dumps each rank's findings into ``out_dir``."""

import importlib
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))

from tests.helpers.multiprocess import finish  # noqa: E402

if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model_dir, scenarios = sys.argv[1], json.loads(sys.argv[2])
    for script, out_dir, *extra in scenarios:
        importlib.import_module(f"tests.{script}").main(model_dir, out_dir, *extra)
    finish()
