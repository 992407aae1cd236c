"""Whether a folder holds a model ``rapo eval`` can load, said from its files before anything loads: evaluation
starts with the base model (minutes), so a bad eval model must be refused before that, not when its turn comes."""

from __future__ import annotations

import json
from pathlib import Path

WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")


def _read_json(path: Path) -> tuple[dict | None, str | None]:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        return None, f"{path} cannot be read ({type(error).__name__}: {error})"
    return (value, None) if isinstance(value, dict) else (None, f"{path} is not a JSON object")


def _checkpoint_hint(folder: Path) -> str:
    """A run folder without a final model (a stopped run): name its newest checkpoint."""
    steps = sorted((int(p.name.removeprefix("checkpoint-")), p) for p in folder.glob("checkpoint-*")
                   if p.name.removeprefix("checkpoint-").isdigit()
                   and any((p / name).is_file() for name in ("config.json", "adapter_config.json")))
    return f"; it holds checkpoints: give --eval_model {steps[-1][1]} (the newest)" if steps else ""


def model_folder_problem(folder) -> str | None:
    """What keeps ``folder`` from loading as a model or a PEFT adapter (``None``: nothing seen)."""
    folder = Path(folder)
    for config_name, weights, what in (("adapter_config.json", ADAPTER_WEIGHTS, "adapter weights"),
                                       ("config.json", WEIGHTS, "weights")):
        config = folder / config_name
        if not config.is_file():
            continue
        values, problem = _read_json(config)
        if problem is not None:
            return problem
        if config_name == "config.json" and "model_type" not in values:
            return f"{config} has no model_type: it is not a transformers model config"
        if not any((folder / name).is_file() for name in weights):
            return f"'{folder}' has a {config_name} but no {what} ({', '.join(weights)})"
        return None
    return f"'{folder}' is not a model folder (no config.json or adapter_config.json){_checkpoint_hint(folder)}"
