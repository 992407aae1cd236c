"""``rapo train`` with ``push_to_hub``: the trained model pushed as TRL pushes an adapter, loadable anywhere.

TRL's adapter names its base by the hub id it was loaded from; the run's adapter names the local folder it was
loaded from, so the pushed copy names the hub id (or ``--base_model_name``). After a LoRA warm start RAPO trains the
warm start's adapter further over the base, so the adapter already carries it. An adapter trained over a merged
warm-start folder gets the warm start's LoRA folded in: both side by side in one adapter of rank r1 + r2
(``B1·A1·s1 + B2·A2·s2 = [s1·B1, s2·B2]·[A1; A2]``, exact), over the model the warm start began from. The run's own
folder is left as it is (``rapo eval`` loads it)."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from rapo_trl.cli.common import GRPO_SAME_ROLLOUTS_DIR
from rapo_trl.cli.errors import UsageError
from rapo_trl.cli.warm_start import SFT_ON_STORE_DIR, SFT_SAME_TIME_DIR, WARM_START_DIR, WARM_START_LORA
from rapo_trl.model_card import card_loading_repo, card_naming_base, card_with_folded_adapter
from rapo_trl.saved_checkpoints import EARLIER_RUN_PREFIX

ADAPTER_CONFIG, ADAPTER_WEIGHTS = "adapter_config.json", "adapter_model.safetensors"
LORA_KEYS = (".lora_A.weight", ".lora_B.weight")
# The weights each config needs beside it, single-file or sharded (an index naming its shards).
MODEL_WEIGHTS = {ADAPTER_CONFIG: ("adapter_model.safetensors", "adapter_model.bin"),
                 "config.json": ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                                 "pytorch_model.bin.index.json")}


def check_pushable(output_dir: str | Path) -> None:
    """Refuse a run folder whose model is not whole (`check_weights`) or is not its recorded run's: a run that stopped
    before it saved its model leaves an earlier run's beside its record, which would be pushed under its base and card."""
    from rapo_trl.cli.run_record import refuse_unfinished_run

    check_weights(output_dir)
    refuse_unfinished_run(str(output_dir), use_checkpoint="push {}")


def check_weights(output_dir: str | Path) -> None:
    """Refuse a run folder whose model is not whole: a config without the weights beside it, or a shard index naming a
    shard that is missing (a save that stopped part way, a folder copied in part). Pushed, the repo would hold a
    model that does not load."""
    folder = Path(output_dir)
    config = ADAPTER_CONFIG if (folder / ADAPTER_CONFIG).is_file() else "config.json"
    if not (folder / config).is_file():
        return
    found = [name for name in MODEL_WEIGHTS[config] if (folder / name).is_file()]
    if not found:
        raise UsageError(f"{folder} has {config} but no weights ({' or '.join(MODEL_WEIGHTS[config])}): its model "
                         "was not saved whole; nothing was pushed")
    if found[0].endswith(".index.json"):
        shards = sorted(set(json.loads((folder / found[0]).read_text()).get("weight_map", {}).values()))
        missing = [shard for shard in shards if not (folder / shard).is_file()]
        if missing:
            raise UsageError(f"{folder} lacks {', '.join(missing)} of the shards {found[0]} names: its model was not "
                             "saved whole; nothing was pushed")


def base_model_name(given: str | None, model_name_or_path: str | None, model_path: str) -> str:
    """What the pushed adapter names as its base: ``given`` (``--base_model_name``), else the hub id the model was
    loaded by (an alias's too), else the local folder's absolute path (it loads on this machine, from any folder)."""
    from rapo_trl.model_card import base_model_hub_id

    return given or base_model_hub_id(model_name_or_path) or str(Path(model_path).resolve())


def hub_folder(output_dir: str | Path, target: str | Path, base_name: str, include_warm_start: bool = False) -> Path:
    """``output_dir`` as it is pushed, written to ``target``: less checkpoints (an earlier run's set aside
    included), ``_*`` files (as TRL leaves them out), the GRPO baseline, and the warm-start and equal-time SFT
    folders (unless ``include_warm_start``); its adapter (and its card) names ``base_name`` and, after a warm start,
    carries the warm start's LoRA."""
    source, target = Path(output_dir), Path(target)
    sft_folders = (WARM_START_DIR, SFT_ON_STORE_DIR, SFT_SAME_TIME_DIR)
    left_out = {"checkpoint-*", f"{EARLIER_RUN_PREFIX}*", "_*", GRPO_SAME_ROLLOUTS_DIR,
                *(() if include_warm_start else sft_folders)}
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(*left_out), dirs_exist_ok=True)
    config_path = target / ADAPTER_CONFIG
    if not config_path.is_file():  # a full fine-tune: the weights are the whole model, the card alone names the base
        if base_name:
            _rewrite_card(target / "README.md", lambda text: card_naming_base(text, base_name))
        return target
    config = json.loads(config_path.read_text())
    warm = source / WARM_START_DIR / WARM_START_LORA
    if Path(str(config.get("base_model_name_or_path"))).name == WARM_START_DIR:
        if not (warm / ADAPTER_CONFIG).is_file():
            raise UsageError(f"{source / WARM_START_DIR} has no {WARM_START_LORA}/ adapter to fold into the pushed "
                             "adapter (a warm start made by an older rapo_trl): train again to push it")
        rapo_rank = int(config["r"])
        config = fold_adapters(warm, source, target)
        _rewrite_card(target / "README.md", lambda text: card_with_folded_adapter(text, config, rapo_rank))
    config["base_model_name_or_path"] = base_name
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True))
    if base_name:  # the card, written at training time, may name another base (or none): the Hub reads it there
        _rewrite_card(target / "README.md", lambda text: card_naming_base(text, base_name))
    return target


def _rewrite_card(card: Path, change) -> None:
    """The pushed copy's card (when the run has one) rewritten by ``change`` (text -> text, ``rapo_trl.model_card``):
    the card was written at training time, before the push decided what it holds and where it goes."""
    if card.is_file():
        card.write_text(change(card.read_text()))


def _lora(folder: Path) -> tuple[dict, dict, float]:
    from safetensors.torch import load_file

    config = json.loads((folder / ADAPTER_CONFIG).read_text())
    unsupported = [key for key in ("use_dora", "rank_pattern", "alpha_pattern", "layers_to_transform") if config.get(key)]
    if unsupported:
        raise UsageError(f"the adapter in {folder} uses {', '.join(unsupported)}: it cannot be folded with the warm "
                         "start; set push_warm_start: true to push the warm-start model with it")
    weights = load_file(str(folder / ADAPTER_WEIGHTS))
    if any("lora_embedding" in key for key in weights):
        raise UsageError(f"the adapter in {folder} adapts embeddings: it cannot be folded with the warm start; set "
                         "push_warm_start: true to push the warm-start model with it")
    rank = int(config["r"])
    scaling = config["lora_alpha"] / (rank ** 0.5 if config.get("use_rslora") else rank)
    return config, weights, scaling


def fold_adapters(first: Path, second: Path, target: Path) -> dict:
    """One LoRA adapter equal to ``first`` then ``second`` applied together, written to ``target``; returns its
    config (``second``'s, with the summed rank). A module only one of them adapts gets zeros from the other."""
    import torch
    from safetensors.torch import save_file

    (config_1, weights_1, scale_1), (config_2, weights_2, scale_2) = _lora(first), _lora(second)
    rank_1, rank_2 = int(config_1["r"]), int(config_2["r"])
    modules = sorted({key[: -len(suffix)] for weights in (weights_1, weights_2) for key in weights
                      for suffix in LORA_KEYS if key.endswith(suffix)})
    folded = {key: value for key, value in weights_2.items() if not key.endswith(LORA_KEYS)}  # modules_to_save
    for module in modules:
        a_key, b_key = module + LORA_KEYS[0], module + LORA_KEYS[1]
        reference = weights_1.get(a_key, weights_2.get(a_key))
        out_features = weights_1.get(b_key, weights_2.get(b_key)).shape[0]
        parts_a, parts_b = [], []
        for weights, rank, scale in ((weights_1, rank_1, scale_1), (weights_2, rank_2, scale_2)):
            if a_key in weights:
                parts_a.append(weights[a_key].float())
                parts_b.append(weights[b_key].float() * scale)  # the scaling moves into B: the fold's is 1
            else:
                parts_a.append(torch.zeros(rank, reference.shape[1]))
                parts_b.append(torch.zeros(out_features, rank))
        folded[a_key], folded[b_key] = torch.cat(parts_a, 0).contiguous(), torch.cat(parts_b, 1).contiguous()
    save_file(folded, str(target / ADAPTER_WEIGHTS), metadata={"format": "pt"})
    suffixes = {module.rsplit(".", 1)[-1] for module in modules}
    return {**config_2, "r": rank_1 + rank_2, "lora_alpha": rank_1 + rank_2, "use_rslora": False,
            "target_modules": sorted(suffixes)}


def push_folder(folder: Path, repo_id: str, token: str | None = None, private: bool | None = None,
                revision: str | None = None, api=None) -> str:
    """Upload ``folder`` to the model repo ``repo_id`` (created when missing), as ``Trainer.push_to_hub`` does."""
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi()
    repo = api.create_repo(repo_id, token=token, private=private, exist_ok=True).repo_id
    _rewrite_card(folder / "README.md", lambda text: card_loading_repo(text, repo))
    api.upload_folder(repo_id=repo, folder_path=str(folder), commit_message="End of training", token=token,
                      revision=revision)
    return repo


def check_repo_id(repo_id: str | None, output_dir: str | Path | None) -> None:
    """Refuse, before anything trains or loads, a repo the Hub would reject: ``repo_id``, else the run folder's name
    (the default), must be ``name`` or ``owner/name``; found only at the push, it would come after training."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    if repo_id is None and output_dir is None:  # the folder is named later, from the run's defaults
        return
    repo = repo_id or Path(output_dir).absolute().name
    try:
        validate_repo_id(repo)
    except HFValidationError as error:
        given = "hub_model_id" if repo_id else f"the run folder's name (the default hub_model_id) {repo!r}"
        raise UsageError(f"{given} is no Hub model repo: {error}") from None


def check_can_push(token: str | None = None) -> None:
    """Refuse, before anything trains, a push that cannot happen: the Hub offline, or no token to push with."""
    from rapo_trl.hub_access import push_problem

    problem = push_problem(token, "push later with `rapo push OUTPUT_DIR`")
    if problem:
        raise UsageError(problem)


def push_run(output_dir: str | Path, repo_id: str | None = None, base_name: str | None = None,
             include_warm_start: bool = False, token: str | None = None, private: bool | None = None,
             revision: str | None = None, api=None) -> tuple[str, str]:
    """Push the run in ``output_dir`` as ``rapo train --push_to_hub`` does (``hub_folder``): to ``repo_id`` (default:
    the folder's name), its adapter naming ``base_name``, else the base the run recorded. Returns ``(repo, base)``."""
    from rapo_trl.cli.run_record import read_run_record

    output_dir = Path(output_dir)
    check_pushable(output_dir)
    base = base_name or (read_run_record(str(output_dir)) or {}).get("base_model")
    if base is None and (output_dir / ADAPTER_CONFIG).is_file():  # a run recorded before its base was
        base = json.loads((output_dir / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
    with tempfile.TemporaryDirectory(prefix="rapo-push-") as staging:
        folder = hub_folder(output_dir, staging, base or "", include_warm_start=include_warm_start)
        repo = push_folder(folder, repo_id or output_dir.absolute().name, token=token, private=private,
                           revision=revision, api=api)
    return repo, base or ""
