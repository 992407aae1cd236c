"""Run by tests/cli/test_warm_start.py under torchrun (two CPU processes, gloo): each process warm-starts, and
records how many times it wrote the model, so the test can check that only the main process did."""

import json
import sys
from pathlib import Path

from transformers import AutoTokenizer, PreTrainedModel

from rapo_trl.cli.warm_start import warm_start
from tests.cli.test_warm_start import _store_and_rows

model_dir, work = sys.argv[1], Path(sys.argv[2])
writes = []
save = PreTrainedModel.save_pretrained


def counted(self, *args, **kwargs):  # the real save, counted: which process wrote the merged model
    writes.append(str(args[0]) if args else "")
    return save(self, *args, **kwargs)


PreTrainedModel.save_pretrained = counted
import torch.distributed as dist  # noqa: E402

rank = int(__import__("os").environ["RANK"])
store, rows = _store_and_rows(work / f"rank{rank}")  # a store folder per process: no shared writes
path = warm_start(model_dir, AutoTokenizer.from_pretrained(model_dir), rows, store, str(work / "out"), steps=1,
                  learning_rate=1e-3, min_reward=1.0, use_cpu=True, seed=0, bf16=False, batch_size=1, merge=True)
# every process may load the model once warm_start returns
loadable = (Path(path) / "config.json").is_file() and (Path(path) / "sft_history.json").is_file()
(work / f"rank{rank}.json").write_text(json.dumps({"writes": len(writes), "loadable": loadable}))
if dist.is_initialized():
    dist.destroy_process_group()
