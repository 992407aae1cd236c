"""What every torchrun script of tests/ does last: dump its rank's findings, then tear gloo down."""

from __future__ import annotations

import json
from pathlib import Path

import torch


def dump_and_finish(out_dir: str, rank: int, dump: dict) -> None:
    """``rank{rank}.json`` in ``out_dir``, then gloo torn down before the interpreter exits: its threads, left
    running, abort a rank at exit ("terminate called without an active exception") now and then."""
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(dump))
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
