"""Optional cold start for ``rapo train``: a few supervised steps on the store's best trajectories.

Very small models (SmolLM2-135M) almost never write a closing tool tag on their own, so they never
reach a tool step, and a hybrid rollout only retrieves after one. A short SFT on the off-policy
agent's trajectories (reassembled from the trace store, so any agent's store works) teaches the tag
protocol. With ``store_split`` set apart from ``demo_split`` they come from the collection beside the store that
build-store fills with the demonstrated questions (the store itself holds RL's questions). With LoRA, RAPO then
trains that same adapter further over the base it was trained on: the warm start is never merged into
half-precision weights, where rounding (at load, or in bf16 autocast) would eat much of its small delta. A run that
trains every weight merges it (in fp32) instead.
"""

from __future__ import annotations

import gc
import hashlib
import json
import logging
import time
from pathlib import Path

from rapo_trl.cli.console import is_main_process, launched_processes, say
from rapo_trl.cli.errors import UsageError
from rapo_trl.cli.retrieved_examples import with_retrieved_examples
from rapo_trl.cli.run_record import stamp_baseline, unstamp_baseline
from rapo_trl.hardware import frozen_weights_dtype
from rapo_trl.store.sft_examples import (
    STEP_SEPARATOR,
    best_trajectories,
    plain_example,
    trajectory_steps_from_store,
)

logger = logging.getLogger(__name__)

SFT_MIN_REWARD = 1.0
"""The reward a stored trajectory needs for the SFT stages of ``rapo train`` to imitate it."""


def trajectories_from_store(store, min_reward: float) -> dict[str, str]:
    """``question_id -> trajectory`` for each question's best stored trajectory with reward >= min_reward."""
    return {qid: STEP_SEPARATOR.join(steps) for qid, steps in trajectory_steps_from_store(store, min_reward).items()}


def check_sft_source(rows, store, min_reward: float, stage: str, questions: str, fix: str) -> None:
    """Refuse an SFT ``stage`` whose ``store`` holds no trajectory with reward >= ``min_reward`` of any of ``rows``'
    questions: it would have no example. Reads the records' metadata alone, so a run finds out before its model loads
    and before an earlier stage trains."""
    from rapo_trl.store.integrity import usable_reward

    wanted, stored = set(rows["question_id"]), False
    for page in store.iter_batches():
        for metadata in page["metadatas"]:
            if metadata.get("question_id") in wanted:
                reward = metadata.get("reward")
                if usable_reward(reward) and float(reward) >= min_reward:
                    return
                stored = True
    held = f"only trajectories below reward {min_reward:g} of them" if stored else "no trajectory of any of them"
    raise UsageError(f"{stage} imitates the stored trajectories (reward >= {min_reward:g}) of {questions}, but the "
                     f"store collection {store.collection_name!r} at {store.location} holds {held}: {fix}")


def warm_start_examples(rows, store, min_reward: float, tokenizer=None, retrieved_share: float = 0.0,
                        seed: int = 0, chat_template_kwargs: dict | None = None) -> list[dict]:
    """SFT examples: each row's best trajectory in ``store`` (the collection of the demonstrated questions,
    `rapo_trl.cli.common.warm_start_collection`); rows without one are left out. As ``prompt`` and ``completion``;
    with ``retrieved_share`` > 0, tokenized (``input_ids``, ``labels``) with that share of the questions given a
    second example that carries a retrieved step (`rapo_trl.cli.retrieved_examples`). Either way rendered with
    ``chat_template_kwargs`` (the recipe's, which RL renders its prompts with)."""
    chosen = best_trajectories(rows, store, min_reward)
    if retrieved_share > 0:
        return with_retrieved_examples(chosen, tokenizer, retrieved_share, seed, store.tool_tags,
                                       chat_template_kwargs)
    return [{**plain_example(prompt, steps), **rendered_with(chat_template_kwargs)} for prompt, steps in chosen]


def rendered_with(chat_template_kwargs: dict | None) -> dict:
    """The column that has TRL's SFT render a chat example with ``chat_template_kwargs``; none where they are unset,
    so that such examples (and the warm start's cache key over them) stay what they were."""
    return {"chat_template_kwargs": dict(chat_template_kwargs)} if chat_template_kwargs else {}


class _StopAfter:
    """A TrainerCallback that ends training once ``seconds`` of wall time have passed since its training loop began
    (equal-time baselines): RAPO's time is counted from its own loop's start (`TrainedSeconds`), so loading the model
    and tokenizing the examples are left out of the budget here too."""

    def __init__(self, seconds: float):
        from transformers import TrainerCallback

        self.seconds = seconds
        self.started = time.perf_counter()
        outer = self

        class Callback(TrainerCallback):
            def on_train_begin(self, args, state, control, **kwargs):
                outer.started = time.perf_counter()
                return control

            def on_step_end(self, args, state, control, **kwargs):
                if time.perf_counter() - outer.started >= outer.seconds:
                    control.should_training_stop = True
                return control

        self.callback = Callback()


WARM_START_DIR, SFT_SAME_TIME_DIR, SFT_ON_STORE_DIR = "sft-warm-start", "sft-same-time", "sft-on-store"
SFT_HISTORY_FILE = "sft_history.json"
"""The SFT stage's loss per step, written once its model is saved: a folder without it holds no finished stage."""
WARM_START_LORA = "lora"
"""With ``merge`` (a run without LoRA), the warm start's LoRA, kept beside the merged model."""


def _merged_over_full_precision_base(peft_model, model_path: str, model_init_kwargs: dict, adapter: Path):
    """The LoRA (saved in ``adapter``) merged into the base as the recipe loads it (fp32 unless its dtype says
    otherwise). A base trained in a half type is loaded again for the merge: adding the small LoRA delta to bf16
    weights would round much of it away."""
    import torch

    peft_model.save_pretrained(adapter)
    if "dtype" in model_init_kwargs or peft_model.get_base_model().dtype == torch.float32:
        return peft_model.merge_and_unload()
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_path, **{**model_init_kwargs, "dtype": torch.float32})
    return PeftModel.from_pretrained(base, adapter).merge_and_unload()


def load_adapter_for_training(model_path: str, adapter: str, model_init_kwargs: dict,
                              lora_dropout: float | None = None):
    """The base loaded as a run loads it (``model_init_kwargs``, its half type included) with ``adapter`` on it,
    trainable: the warm start's LoRA, trained further; with the run's ``lora_dropout`` where given (the adapter's
    own otherwise: dropout is a training setting, not part of the weights)."""
    from peft import PeftConfig, PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_path, **model_init_kwargs)
    config = PeftConfig.from_pretrained(adapter)
    if lora_dropout is not None:
        config.lora_dropout = lora_dropout
    return PeftModel.from_pretrained(base, adapter, config=config, is_trainable=True)


WARM_START_KEY_FILE = "warm_start_key.json"
_FORMAT = 4  # in the cache key: an older warm start (merged, format 1-2; configs unkeyed, 3) is made again
LORA = {"r": 16, "lora_alpha": 32, "target_modules": "all-linear"}
_VERSIONED = ("rapo_trl", "torch", "transformers", "trl", "peft", "datasets")


def warm_start_key(model_path: str, examples: list[dict], **settings) -> str:
    """What a warm start depends on, hashed: the base model (its path and its weight files' sizes and times, or for
    a hub id the commit its revision names in the local cache), the SFT examples (the store's trajectories for the
    demonstrated questions), the settings (the tokenizer and chat template that render the examples, and the
    launch's process count, among them), and package versions."""
    from importlib import metadata

    weights = _fingerprint(model_path)
    revision = (settings.get("model_init_kwargs") or {}).get("revision")
    versions = {}
    for name in _VERSIONED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    payload = {"format": _FORMAT, "model": str(model_path), "weights": weights, "examples": examples, "lora": LORA,
               "settings": settings, "versions": versions}
    commit = _hub_commit(str(model_path), revision)
    if commit is not None:  # keyed only where there is one: a folder's key stays what it was
        payload["hub_commit"] = commit
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=_stable_json).encode()).hexdigest()


WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin", "adapter_model.bin")
"""The weight files transformers and PEFT load from a folder: safetensors, or the pickled ones older versions wrote."""


CONFIG_FILES = ("config.json", "adapter_config.json")
"""What a model or an adapter computes with its weights: an edited config (rope scaling, a LoRA's alpha) keeps the
weight files as they were."""


def _fingerprint(path: str | None) -> list:
    """What a model or adapter folder holds: its weight files' names, sizes and times, its config files' contents,
    and the key it was made under where it is a warm start of its own (a folder trained again keeps its path and, for
    a LoRA, its sizes)."""
    if path is None or not Path(path).is_dir():
        return []
    folder = Path(path)
    weights = {f for pattern in WEIGHT_FILES for f in folder.glob(pattern)}
    found: list = sorted((f.name, f.stat().st_size, int(f.stat().st_mtime)) for f in weights)
    for name in CONFIG_FILES:
        if (folder / name).is_file():
            found.append([name, hashlib.sha256((folder / name).read_bytes()).hexdigest()])
    stamp = folder / WARM_START_KEY_FILE
    if stamp.is_file():
        found.append(["made_under", stamp.read_text()])
    return found


def _hub_commit(model: str, revision: str | None) -> str | None:
    """The commit that a hub id's ``revision`` names in the local Hugging Face cache (the name of the snapshot folder
    transformers loads from), so that a branch moved on the hub keys a new warm start instead of reusing one made over
    the old weights; None for a local folder, or for an id with nothing cached."""
    if Path(model).is_dir():
        return None
    from huggingface_hub import try_to_load_from_cache

    for name in ("config.json", "adapter_config.json"):  # a model's, or an adapter's
        try:
            found = try_to_load_from_cache(model, name, revision=revision or "main")
        except ValueError:  # not a hub id either
            return None
        if isinstance(found, str):
            return Path(found).parent.name
    return None


def _tokenizer_fingerprint(tokenizer) -> str | None:
    """How ``tokenizer`` splits text, hashed: its vocabulary, merges, normalizer and added tokens as the tokenizers
    library writes them (a tokenizer.json edited in the model's folder, the weights untouched, tokenizes the examples
    otherwise), or its vocabulary where it has no such backend; None without a tokenizer."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        written = backend.to_str()
    elif hasattr(tokenizer, "get_vocab"):
        written = json.dumps(sorted(tokenizer.get_vocab().items()))
    else:
        return None
    return hashlib.sha256(written.encode()).hexdigest()


def _stable_json(value):
    """JSON for what ``json`` cannot write, the same in every process: a set (``LoraConfig.target_modules``) is
    written sorted, since its iteration order follows the process's string hash seed."""
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=str)
    return str(value)


def cached_warm_start(target: Path, key: str) -> bool:
    """Whether ``target`` holds a finished warm start made under ``key``."""
    stamp = target / WARM_START_KEY_FILE
    if not stamp.is_file():
        return False
    try:
        return json.loads(stamp.read_text()).get("key") == key
    except (json.JSONDecodeError, AttributeError):
        return False


def warm_start(model_path: str, tokenizer, rows, store, output_dir: str, steps: int, learning_rate: float,
               min_reward: float, use_cpu: bool, seed: int, bf16: bool | None = None, fp16: bool = False,
               max_seconds: float | None = None, folder: str = WARM_START_DIR, batch_size: int = 4,
               merge: bool = False, model_init_kwargs: dict | None = None, lora: dict | None = None,
               start_adapter: str | None = None, retrieved_share: float = 0.0, run_id: str | None = None,
               chat_template_kwargs: dict | None = None) -> str:
    """SFT a LoRA on stored trajectories and save it in ``output_dir/folder``; return its path.

    Trains ``steps`` steps, or until ``max_seconds`` of wall time when that is given (the equal-time SFT
    baseline). The adapter is saved with ``model_path`` as its base; ``start_adapter`` (an adapter folder over the
    same base) is trained further instead of a fresh LoRA of shape ``lora`` (``LoraConfig`` fields; the RL recipe's,
    so RAPO can go on training it). With ``merge`` the LoRA is merged over the fp32 base and the full model saved
    (a base for a run that trains every weight). With ``retrieved_share`` > 0 that share of the questions also get an
    example in which a step arrives retrieved (`rapo_trl.cli.retrieved_examples`).
    The loss per step goes to ``sft_history.json`` beside the model.
    ``bf16``/``fp16`` are the RAPO run's precision (``None``: from the hardware, as `RAPOConfig` does).
    ``model_init_kwargs`` load the model (the recipe's ModelConfig flags).
    ``chat_template_kwargs``: the recipe's extra chat template arguments, which render the examples as RL renders
    its prompts.
    The folder is stamped with ``run_id``, the ``rapo train`` run's (`rapo_trl.cli.run_record.stamp_baseline`), once
    finished or reused.
    """
    if bf16 is None and not fp16:
        from rapo_trl.hardware import default_precision, trainer_device

        precision = default_precision(trainer_device(use_cpu))
        bf16, fp16 = precision == "bf16", precision == "fp16"
    from datasets import Dataset
    from peft import LoraConfig
    from trl import SFTConfig, SFTTrainer

    from rapo_trl.memory import with_freed_memory_release

    examples = warm_start_examples(rows, store, min_reward, tokenizer, retrieved_share, seed, chat_template_kwargs)
    target = Path(output_dir) / folder
    key = None
    if max_seconds is None:  # a clock-bounded run (the equal-time baseline) depends on the clock: never reused
        processes = launched_processes()
        key = warm_start_key(model_path, examples, steps=steps, learning_rate=learning_rate, batch_size=batch_size,
                             seed=seed, bf16=bool(bf16), fp16=bool(fp16), merge=merge,
                             lora=lora.to_dict() if hasattr(lora, "to_dict") else lora or LORA,
                             start_adapter=start_adapter, model_init_kwargs=model_init_kwargs or {},
                             chat_template=getattr(tokenizer, "chat_template", None),  # renders the examples
                             tokenizer=_tokenizer_fingerprint(tokenizer),  # splits them into tokens
                             **({"start_adapter_files": _fingerprint(start_adapter)} if start_adapter else {}),
                             **({"retrieved_share": retrieved_share} if retrieved_share > 0 else {}),
                             # they render the examples too; keyed only when set: an unset run keeps its key
                             **({"chat_template_kwargs": chat_template_kwargs} if chat_template_kwargs else {}),
                             # each process trains on its own batch_size examples a step, so the launch's size
                             # sets the batch each step averages over; keyed only above 1: a lone run keeps its key
                             **({"processes": processes} if processes > 1 else {}))
        if cached_warm_start(target, key):
            logger.info("SFT %s: reusing %s (same model, examples, settings and versions)", folder, target)
            say(f"Warm start reused from {target} (same model, examples, settings and package versions).")
            if is_main_process():  # what this run would have made: this run's
                stamp_baseline(target, run_id)
            return str(target)
        (target / WARM_START_KEY_FILE).unlink(missing_ok=True)  # the folder is about to be rewritten
    unstamp_baseline(target)
    init_kwargs = dict(model_init_kwargs or {})
    half = frozen_weights_dtype(bool(bf16), bool(fp16)) if "quantization_config" not in init_kwargs else None
    if half is not None:
        init_kwargs.setdefault("dtype", half)  # the frozen base in the half type; the LoRA stays fp32
    args = SFTConfig(
        output_dir=str(target / "run"), max_steps=steps if max_seconds is None else 10**9,
        learning_rate=learning_rate, per_device_train_batch_size=batch_size,
        lr_scheduler_type="linear" if max_seconds is None else "constant",
        logging_steps=1, save_strategy="no", report_to="none", use_cpu=use_cpu, bf16=bf16, fp16=fp16, seed=seed,
        gradient_checkpointing=False, model_init_kwargs=init_kwargs,
        disable_tqdm=max_seconds is not None,  # a clock-bounded run has no step count for a progress bar
    )
    stop = _StopAfter(max_seconds) if max_seconds is not None else None
    if start_adapter is None:
        model, peft_config = model_path, lora if isinstance(lora, LoraConfig) else LoraConfig(**(lora or LORA))
    else:
        model, peft_config = load_adapter_for_training(model_path, start_adapter, init_kwargs), None
    trainer = SFTTrainer(
        model, args=args, train_dataset=Dataset.from_list(examples), processing_class=tokenizer,
        peft_config=peft_config, callbacks=with_freed_memory_release([stop.callback] if stop else None, args.device),
    )
    started = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - started
    history = [{"step": e["step"], "loss": e["loss"]} for e in trainer.state.log_history if "loss" in e]
    logger.info("SFT %s: %d examples, %d steps in %.0fs, loss %.3f -> %.3f", folder, len(examples),
                trainer.state.global_step, seconds, history[0]["loss"], history[-1]["loss"])
    # Under `accelerate launch` every process trained; one (the main) merges and writes, the others wait for it
    # before they load what it wrote.
    if trainer.accelerator.is_main_process:
        _save(trainer, tokenizer, target, model_path, merge, model_init_kwargs or {})
        (target / SFT_HISTORY_FILE).write_text(json.dumps(
            {"examples": len(examples), "steps": trainer.state.global_step, "seconds": round(seconds, 1),
             "learning_rate": learning_rate, "batch_size": batch_size, "loss": history}, indent=2))
        if key is not None:  # written last: a folder without it (a killed save) is never taken for a finished one
            (target / WARM_START_KEY_FILE).write_text(json.dumps({"key": key}))
        stamp_baseline(target, run_id)
    trainer.accelerator.wait_for_everyone()
    del trainer
    gc.collect()  # the caller loads the saved model next; do not hold a second copy and its optimizer state
    return str(target)


def _save(trainer, tokenizer, target: Path, model_path: str, merge: bool, model_init_kwargs: dict) -> None:
    """The merged model (``merge``) or the adapter alone, with the tokenizer, in ``target``, less the other kind's
    files an earlier warm start left there: transformers loads an adapter_config.json beside a config.json on top of
    the model, and `rapo eval` loads such a folder as that adapter over its base."""
    if merge:
        for stale in ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin"):
            (target / stale).unlink(missing_ok=True)
        merged = _merged_over_full_precision_base(trainer.accelerator.unwrap_model(trainer.model), model_path,
                                                  model_init_kwargs, target / WARM_START_LORA)
        merged.save_pretrained(target)
        del merged
    else:  # adapter_config.json + adapter_model.safetensors; its base_model_name_or_path is model_path
        model = trainer.accelerator.unwrap_model(trainer.model)
        for stale in ("config.json", "model.safetensors"):
            (target / stale).unlink(missing_ok=True)
        model.peft_config["default"].base_model_name_or_path = model_path
        model.save_pretrained(target)
    tokenizer.save_pretrained(target)
