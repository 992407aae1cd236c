"""Pieces the ``rapo`` subcommands share: models, data, tools, store and reward from one config."""

from __future__ import annotations

import json
from pathlib import Path

from rapo_trl.cli.arguments import RAPOScriptArguments, name_list
from rapo_trl.cli.errors import UsageError
from rapo_trl.cli.imports import check_import_path, import_object, is_import_path
from rapo_trl.cli.rewards import ROW_COLUMNS, check_reward_names
from rapo_trl.cli.user_data import USER_TASKS, check_user_data, jsonl_columns, user_splits

MODEL_ALIASES = ("smollm2", "tiny")
GRPO_SAME_ROLLOUTS_DIR = "grpo-same-rollouts"
"""Where ``rapo train --grpo_same_rollouts`` saves the GRPO baseline, inside its output_dir: scored by ``rapo eval``,
never pushed."""
TASK_NAMES = ("arithmetic", "word_problems", "two_hop", "gsm8k", *USER_TASKS)
DEMO_TASKS = ("arithmetic", "word_problems", "two_hop")  # shipped, with a scripted expert
# Questions the shipped tasks draw when train_size/eval_size are unset (the demo tasks generate as many as
# asked; GSM8K's 1,319). Your own data has no such default: every row is used, as `trl grpo` uses its split.
SHIPPED_TRAIN_SIZE, SHIPPED_EVAL_SIZE = 64, 32


def check_script_arguments(command: str, script: RAPOScriptArguments) -> None:
    """Refuse sizes that would only fail later (after the tokenizer or model loads) with a misleading message."""
    sizes = {"train": ("train_size",), "build-store": ("train_size",), "eval": ("eval_size",)}.get(command, ())
    for name in sizes:
        value = getattr(script, name)
        if value is not None and value < 1:
            raise UsageError(f"{name} must be >= 1 (a cap on the questions; unset: every row), got {value}")
    if command == "build-store":
        for name in ("num_samples", "keep_top_k"):  # 0 would build nothing, and a resumed build would say it succeeded
            if getattr(script, name) < 1:
                raise UsageError(f"{name} must be >= 1 (trajectories a question), got {getattr(script, name)}")
    if script.task not in TASK_NAMES:
        from rapo_trl.cli.parsing import closest

        close = closest(script.task, TASK_NAMES)
        raise UsageError(f"unknown task '{script.task}'" + (f" (did you mean '{close}'?)" if close else "")
                         + f"; choose one of {', '.join(TASK_NAMES)}")
    file_keys = check_user_data(script)
    if script.tools is not None or script.search_corpus:  # names and files only: nothing is built or imported
        tool_names(script)
    if command in ("train", "build-store"):
        # a JSONL's rows have these columns and the file's keys: a reward's arguments are checked against them,
        # unimported
        check_reward_names(script, jsonl_columns(ROW_COLUMNS, file_keys)
                           if script.task in USER_TASKS and script.dataset_path else None)
    if script.closeness_weight < 0:
        raise UsageError(f"closeness_weight must be >= 0 (0 turns it off), got {script.closeness_weight}")


def check_model(name: str | None, revision: str = "main") -> None:
    """Refuse a model that cannot load, without loading or converting it: an alias, a folder, or a hub id
    (which, with the hub offline, must be in the local Hugging Face cache, where transformers loads it from)."""
    if not name:
        raise UsageError("no model given: set model_name_or_path in the config or pass --model_name_or_path")
    if name in MODEL_ALIASES or Path(name).is_dir():
        return
    if name.startswith((".", "/", "~")):
        raise UsageError(f"model path '{name}' does not exist; give a local model folder, a hub id or one of "
                         f"{', '.join(MODEL_ALIASES)}")
    import huggingface_hub

    if huggingface_hub.is_offline_mode() and not _in_hub_cache(name, revision):
        raise UsageError(
            f"model '{name}' is neither a local folder nor in the Hugging Face cache ({huggingface_hub.constants.HF_HUB_CACHE}"
            f", revision {revision}), and the hub is offline (HF_HUB_OFFLINE); download it where the hub is reachable, "
            f"or give a local model folder or one of {', '.join(MODEL_ALIASES)}"
        )


def _in_hub_cache(repo_id: str, revision: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    try:  # a model's config.json, or an adapter's
        found = [try_to_load_from_cache(repo_id, name, revision=revision)
                 for name in ("config.json", "adapter_config.json")]
    except ValueError:  # not a valid hub id either
        return False
    return any(isinstance(path, str) for path in found)


def resolve_model_path(name: str | None, revision: str = "main") -> str:
    """What ``from_pretrained`` loads for ``name``: an alias (``smollm2``, ``tiny``) made into a local folder
    (SmolLM2 is converted once, which takes a minute: call this after every other check), a folder, or a hub id."""
    check_model(name, revision)
    if name == "smollm2":
        from rapo_trl.models import smollm2_path

        return str(smollm2_path())
    if name == "tiny":
        from rapo_trl.models import build_tiny_model, default_cache_dir

        folder = default_cache_dir() / "tiny-qwen2"
        if not (folder / "config.json").exists():
            build_tiny_model(folder)
        return str(folder)
    return name


def check_quantization(model_args) -> None:
    """load_in_4bit/8bit (QLoRA) load through bitsandbytes: say so before anything loads, if it is missing."""
    import importlib.util

    if model_args.load_in_4bit and model_args.load_in_8bit:
        raise UsageError("set load_in_4bit or load_in_8bit, not both")
    flag = "load_in_4bit" if model_args.load_in_4bit else "load_in_8bit" if model_args.load_in_8bit else None
    if flag and importlib.util.find_spec("bitsandbytes") is None:
        raise UsageError(f"{flag} quantizes the model with bitsandbytes, which is not installed: "
                         "pip install bitsandbytes (it needs a CUDA GPU)")


def model_init_kwargs(model_args, rapo_args) -> dict:
    """``from_pretrained`` keyword arguments from TRL's ModelConfig flags, as ``trl/scripts/grpo.py`` builds them
    (the recipe's own ``model_init_kwargs`` win). Flags left unset are left out: the loader's default applies."""
    kwargs = dict(revision=model_args.model_revision, trust_remote_code=rapo_args.trust_remote_code,
                  attn_implementation=model_args.attn_implementation, dtype=model_args.dtype)
    kwargs.update(rapo_args.model_init_kwargs or {})
    return {key: value for key, value in kwargs.items() if value is not None}


def load_policy(path: str, device: str | None = None, quantization_config=None, **init_kwargs):
    """`rapo_trl.rollout.agent.load_policy` with TRL's loading flags (``model_init_kwargs``), imported only when a
    model loads: help and input errors answer without torch."""
    from rapo_trl.rollout.agent import load_policy as load

    dtype = init_kwargs.pop("dtype", None)
    return load(path, device=device, dtype=dtype, quantization_config=quantization_config, **init_kwargs)


TRAINING_ROLES = ("train", "demo", "store")
GENERIC_EVAL_SPLIT = "eval"


def task_split(script: RAPOScriptArguments, split: str) -> str:
    """The task split behind ``split``: ``train`` is the RL questions (``train_split``), ``demo`` the questions the
    warm start imitates (``demo_split``, default ``train_split``), ``store`` the questions the store holds
    (``store_split``, default ``demo``'s); any other name is an eval set."""
    if split == "train":
        return script.train_split
    if split == "demo":
        return script.demo_split or script.train_split
    if split == "store":
        return script.store_split or task_split(script, "demo")
    return split


WARM_START_SUFFIX = "-warm-start"


def warm_start_collection(script: RAPOScriptArguments) -> str:
    """The collection whose trajectories the SFT warm start imitates: the store's own when it holds the demo split's
    questions; else ``<store_collection>-warm-start`` beside it. A collection, not trajectories drawn at train time:
    build-store runs whatever agent the recipe names (a model too) once, and the store stays RL's questions alone, so
    retrieval never finds a demonstrated question's step."""
    if task_split(script, "store") == task_split(script, "demo"):
        return script.store_collection
    return script.store_collection + WARM_START_SUFFIX


def is_eval_split(script: RAPOScriptArguments, split: str) -> bool:
    return split not in TRAINING_ROLES


def eval_splits(script: RAPOScriptArguments) -> list[str]:
    """The eval sets of ``rapo eval``, each scored in its own table."""
    return name_list(script.eval_splits or None, ["heldout_shapes" if script.task == "word_problems" else GENERIC_EVAL_SPLIT])


def question_cap(script: RAPOScriptArguments, evaluating: bool) -> int | None:
    """How many questions ``eval_size``/``train_size`` let a set have: None (every row) for your own data unless
    set; the shipped tasks' default otherwise."""
    size = script.eval_size if evaluating else script.train_size
    if size is not None or script.task in USER_TASKS:
        return size
    return SHIPPED_EVAL_SIZE if evaluating else SHIPPED_TRAIN_SIZE


def _first(rows, n: int | None):
    return rows if n is None or n >= len(rows) else rows.select(range(n))


def load_questions(script: RAPOScriptArguments, split: str):
    """Raw question/answer rows of the configured task: ``split`` is ``train``, ``demo`` or an eval set."""
    evaluating = is_eval_split(script, split)
    n = question_cap(script, evaluating)
    for knob in ("task_difficulty", "eval_difficulty", "task_tool_steps"):
        if getattr(script, knob) is not None and script.task != "word_problems":
            raise UsageError(f"{knob} applies to task=word_problems only, not task={script.task}")
    name = task_split(script, split)
    if script.task != "word_problems" and name not in ("train", "eval"):
        raise UsageError(f"task={script.task} has the splits train and eval, not {name!r}")
    if evaluating != (name not in ("train", "demonstrated", "reward_only")):
        role = "an eval set" if evaluating else "a training split"
        raise UsageError(f"split {name!r} cannot be {role}: training and eval questions never mix")
    split = name
    if script.task in DEMO_TASKS:
        from rapo_trl.tasks import load_task

        # task_difficulty shapes the training distribution; eval_difficulty (default: every held-out
        # template) chooses which held-out templates are asked, the same for every model of a table.
        difficulty = script.eval_difficulty if evaluating else script.task_difficulty
        options = {"difficulty": difficulty} if difficulty is not None else {}
        if script.task_tool_steps is not None and not evaluating:  # only the expert reads it: eval rows stay as they are
            options["tool_steps"] = script.task_tool_steps
        try:
            return load_task(script.task, split=split, n=n, seed=script.task_seed, **options)
        except ValueError as error:
            raise UsageError(str(error)) from None
    if script.task == "gsm8k":
        from rapo_trl.tasks import load_gsm8k

        rows = load_gsm8k(n=None)
        # GSM8K ships only its test split: the first eval_size rows evaluate, the rest may train.
        if split == "eval":
            return _first(rows, n)
        start = min(question_cap(script, evaluating=True), len(rows))
        return _first(rows.select(range(start, len(rows))), n)
    if script.task in USER_TASKS:
        check_user_data(script)
        train, held_out = user_splits(script)  # never a question in both
        return _first(held_out if split == "eval" else train, n)
    raise UsageError(f"unknown task '{script.task}'; choose one of {', '.join(TASK_NAMES)}")


def training_rows(script: RAPOScriptArguments, split: str, tools: list | None = None):
    """Prompted rows whose system prompt teaches exactly ``tools`` (default: `build_tools`), as
    ``to_rapo_rows(tools=...)`` does from Python; python-only recipes get the short python prompt (a third of the
    tokens to prefill). A conversation's own system turn follows it (`system_turn_column`)."""
    from rapo_trl.tasks import to_rapo_rows

    questions = load_questions(script, split)
    return to_rapo_rows(questions, tools=build_tools(script) if tools is None else tools,
                        system_column=system_turn_column(questions))


def system_turn_column(questions) -> str | None:
    """The column of the questions' own system turns (a TRL conversational prompt's), None when none has one."""
    from rapo_trl.cli.user_data import SYSTEM_TURN_COLUMN

    return SYSTEM_TURN_COLUMN if SYSTEM_TURN_COLUMN in questions.column_names else None


def count_line(verb: str, script: RAPOScriptArguments, sets: dict) -> str:
    """``"Training on 450 questions (task=dataset, train: 450; every row; train_size caps them)"``: what a command
    uses, by split; ``sets`` maps each split to its questions (rows, or the indices of those it asks)."""
    evaluating = verb.startswith("Evaluat")
    cap_name = "eval_size" if evaluating else "train_size"
    cap = getattr(script, cap_name)
    how = (f"at most {cap_name}={cap}" if cap is not None
           else f"every row; {cap_name} caps them" if script.task in USER_TASKS
           else f"{question_cap(script, evaluating)} by default; {cap_name} sets how many")
    counts = ", ".join(f"{name}: {len(rows)}" for name, rows in sets.items())
    total = sum(len(rows) for rows in sets.values())
    return f"{verb} {total} questions (task={script.task}, {counts}; {how})"


BUILTIN_TOOLS = ("python", "search")


def tool_names(script: RAPOScriptArguments) -> list[str]:
    """The recipe's tools: built-in names and import paths (the prompt teaches the built-in ones it names)."""
    if script.tools is not None:
        names = [script.tools] if isinstance(script.tools, str) else list(script.tools)
    elif script.task in DEMO_TASKS:
        from rapo_trl.tasks import get_task

        names = list(get_task(script.task).tools)
    else:
        names = ["python"]
    unknown = [name for name in names if name not in BUILTIN_TOOLS and not is_import_path(name)]
    if unknown:
        raise UsageError(f"unknown tool(s) {sorted(unknown)}; available: python, search, or an import path "
                         "(pkg.module.name) to a Tool or a typed function")
    for name in names:
        if name not in BUILTIN_TOOLS:
            check_import_path(name, "tool")  # its module and name, read from source: nothing runs yet
    if "search" in names and not script.search_corpus and script.task != "two_hop":
        raise UsageError("the search tool needs a corpus: set search_corpus to a JSONL of passages "
                         "(task=two_hop ships one)")
    if script.search_corpus and not Path(script.search_corpus).is_file():
        raise UsageError(f"search_corpus {script.search_corpus!r} is not a file; give a JSONL of passages")
    return names


def build_tools(script: RAPOScriptArguments) -> list:
    from rapo_trl.tools import PythonTool

    tools = []
    for name in tool_names(script):
        if name == "python":
            tools.append(PythonTool(timeout=script.python_timeout))
        elif name == "search":
            tools.append(search_tool(script))
        else:
            tools.append(user_tool(name))
    return tools


def search_tool(script: RAPOScriptArguments):
    """``SearchTool`` over ``search_corpus`` (a JSONL of passages), else the task's own corpus."""
    from rapo_trl.tools import SearchTool

    if script.search_corpus:
        from datasets import load_dataset

        try:
            corpus = load_dataset("json", data_files=script.search_corpus, split="train")
            return SearchTool(corpus)
        except ValueError as error:
            raise UsageError(f"search_corpus {script.search_corpus}: {error}") from None
    from rapo_trl.tasks import load_corpus

    return SearchTool(load_corpus(script.task))


def user_tool(path: str):
    """A tool named by import path: a Tool object, a Tool class (made with no arguments) or a typed function."""
    from rapo_trl.tools.function_tool import as_tool
    from rapo_trl.tools.registry import tools_by_tag

    tool = import_object(path, "tool")
    tool = as_tool(tool() if isinstance(tool, type) else tool)
    try:
        tools_by_tag([tool])  # the shape and tag checks RAPOTrainer makes, now, with the path in the message
    except (TypeError, ValueError) as error:
        raise UsageError(f"tool '{path}': {error}") from None
    return tool


def check_store_location(script: RAPOScriptArguments, must_exist: bool) -> tuple[str, int] | None:
    """``(host, port)`` of ``store_server``, or None after checking ``store_path``: cheap, so the commands
    call it before loading a model or tokenizer."""
    if script.store_server:
        host, _, port = script.store_server.rpartition(":")
        if not host or not port.isdigit():
            raise UsageError(f"store_server must be host:port, got '{script.store_server}'")
        return host, int(port)
    if Path(script.store_path).is_file():
        raise UsageError(f"store path '{script.store_path}' is a file, not a store folder; set store_path to "
                         f"the folder `rapo build-store` writes")
    if must_exist and not Path(script.store_path).is_dir():
        raise UsageError(f"store path '{script.store_path}' does not exist; build it first with `rapo build-store`")
    return None


def open_store(script: RAPOScriptArguments, must_exist: bool, collection: str | None = None):
    """The recipe's store: ``collection`` (default ``store_collection``) at ``store_server`` or ``store_path``."""
    from rapo_trl.store import TraceStore

    collection = collection or script.store_collection
    server = check_store_location(script, must_exist)
    if server is not None:
        return TraceStore.connect(*server, collection=collection, must_exist=must_exist)
    return TraceStore(script.store_path, collection=collection, must_exist=must_exist)


def write_json(path: str | Path, payload) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(payload, indent=2, default=str))
