"""What every torchrun scenario of tests/ does last (dump its rank's findings), and what the process does once all
its scenarios have run (tear gloo down)."""

from __future__ import annotations

import json
from pathlib import Path

import torch


def dump_rank(out_dir: str, rank: int, dump: dict) -> None:
    """``rank{rank}.json`` in ``out_dir``, then wait for the other ranks: the next scenario starts on all at once."""
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(dump))
    if torch.distributed.is_initialized():
        torch.distributed.barrier()


def finish() -> None:
    """Gloo torn down before the interpreter exits: its threads, left running, abort a rank at exit ("terminate
    called without an active exception") now and then."""
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
