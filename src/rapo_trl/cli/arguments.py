"""The ``rapo`` command's own settings (beside RAPOConfig and TRL's ModelConfig), one YAML for all."""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, field, fields

from rapo_trl.hardware import PRECISION_RULE


@dataclass
class RAPOScriptArguments:
    """What to train on, with which tools and store, and how to build and evaluate."""

    task: str = field(
        default="arithmetic",
        metadata={"help": "arithmetic, word_problems, two_hop, gsm8k, or dataset (your own: dataset_path or "
                  "dataset_name; jsonl is the same)."},
    )
    dataset_path: str | None = field(
        default=None, metadata={"help": "task=dataset: a JSONL file of questions and answers, one object a line."}
    )
    dataset_name: str | None = field(
        default=None,
        metadata={"help": "task=dataset: a Hub dataset id or a local dataset folder (data files, or one "
                  "`save_to_disk` wrote), loaded with datasets as `trl grpo` does."},
    )
    dataset_config: str | None = field(
        default=None, metadata={"help": "task=dataset: the configuration of dataset_name (load_dataset's name)."}
    )
    dataset_train_split: str = field(default="train", metadata={"help": "task=dataset: split of dataset_name to train on."})
    dataset_test_split: str | None = field(
        default=None,
        metadata={"help": "task=dataset: split of dataset_name to evaluate on (a name it lacks is an error). Unset: its "
                  "`test` split when it has one, else eval_fraction of the training split is held out."},
    )
    eval_dataset_path: str | None = field(
        default=None,
        metadata={"help": "task=dataset: a JSONL file of evaluation questions; without it eval_fraction of "
                  "dataset_path is held out. Training never sees an evaluation question either way."},
    )
    eval_fraction: float = field(
        default=0.1,
        metadata={"help": "task=dataset without eval_dataset_path or a test split: the share of the data held out "
                  "for evaluation (drawn with task_seed), never trained on."},
    )
    question_column: str = field(default="question", metadata={"help": "task=dataset: the question column."})
    answer_column: str = field(default="answer", metadata={"help": "task=dataset: the answer column."})
    train_size: int | None = field(
        default=None,
        metadata={"help": "Cap on the training questions. Unset: every row of your own data (task=dataset), as `trl "
                  "grpo` trains on the whole split; the generated demo tasks and gsm8k draw 64."},
    )
    eval_size: int | None = field(
        default=None,
        metadata={"help": "Cap on the evaluation questions, never training ones (the demo tasks' eval split; "
                  "task=dataset: eval_dataset_path, dataset_test_split, or the eval_fraction held out of training). "
                  "Unset: every held-out row of your own data; the demo tasks and gsm8k ask 32."},
    )
    task_seed: int = field(default=0, metadata={"help": "Seed that generates the demo tasks' splits."})
    task_difficulty: int | None = field(
        default=None,
        metadata={"help": "word_problems: training templates with at most 2 (1), 3 (2) or 4 (3) operations. "
                  "Default: all. Applies to the training questions only (see eval_difficulty)."},
    )
    eval_difficulty: int | None = field(
        default=None,
        metadata={"help": "word_problems: ask only held-out templates with at most 2 (1), 3 (2) or 4 (3) operations. "
                  "Default: every held-out template."},
    )
    task_tool_steps: str | None = field(
        default=None,
        metadata={"help": "word_problems, build-store's expert: one <python> call per question (one) or one per "
                  "operation, each using the number the previous call printed (per_operation). Default: one.",
                  "choices": ["one", "per_operation"]},
    )
    train_split: str = field(
        default="train",
        metadata={"help": "Split RL trains on. word_problems also has demonstrated, reward_only (stories of the "
                  "training programs demonstrated nowhere) and the eval splits reward_only_fresh (the reward-only "
                  "stories' questions RL never trains on), heldout_stories, heldout_shapes."},
    )
    demo_split: str | None = field(
        default=None,
        metadata={"help": "Split the SFT warm start imitates (and the store holds, unless store_split says otherwise). "
                  "Default: train_split. word_problems: `demonstrated` with train_split `reward_only` keeps RL's "
                  "questions out of the warm start."},
    )
    store_split: str | None = field(
        default=None,
        metadata={"help": "Split whose questions build-store has the agent solve for the store (what retrieval "
                  "finds). Default: demo_split. Set it to train_split for the paper's store of RL's own questions; "
                  "the warm start's trajectories then go to the collection `<store_collection>-warm-start`."},
    )
    eval_splits: list[str] | None = field(
        default=None,
        metadata={"help": "eval: the eval sets, each a table. Default: eval (word_problems: heldout_shapes)."},
    )
    eval_samples: int = field(
        default=0,
        metadata={"help": "eval: k sampled rollouts per question at eval_temperature for mean@k (0: greedy "
                  "pass@1 only)."},
    )
    eval_temperature: float | None = field(
        default=None,
        metadata={"help": "eval: temperature of the mean@k rollouts (default: the training temperature). Fixed, it "
                  "keeps one yardstick across recipes that sample RL's rollouts at different temperatures."},
    )
    eval_sample_size: int | None = field(
        default=None, metadata={"help": "eval: questions per set scored by mean@k (default: eval_size)."}
    )
    eval_sampled_splits: list[str] | None = field(
        default=None, metadata={"help": "eval: the sets scored by mean@k too (default: every eval set)."}
    )
    eval_models: list[str] | None = field(
        default=None,
        metadata={"help": "eval: the models scored, of base, warm_start, sft_on_store, sft_same_time, "
                  "grpo_same_rollouts, trained (default: every one the run made, and base unless eval_base is false)."},
    )
    eval_sampled_models: list[str] | None = field(
        default=None,
        metadata={"help": "eval: the models scored by mean@k too, of base, warm_start, sft_on_store, "
                  "sft_same_time, grpo_same_rollouts, trained (default: all)."},
    )
    eval_scoring: str = field(
        default="auto",
        metadata={"help": "eval: how pass@1 compares an answer with its gold: math (math-verify equivalence: 0.5 "
                  "passes for 1/2 and \\frac{1}{2}), exact (exact match after SQuAD normalisation), or auto (math "
                  "for the shipped numeric tasks and for a set whose every gold is a number, exact otherwise)."},
    )
    tools: list[str] | None = field(
        default=None,
        metadata={"help": "Tools: python, search, or an import path (pkg.module.name) to a Tool, a Tool class or a "
                  "typed function with a docstring. Default: the task's."},
    )
    environment_factory: str | None = field(
        default=None,
        metadata={"help": "train, build-store: import path (pkg.module.Class) of a TRL environment (reset, tool "
                  "methods, optional get_reward), as GRPOTrainer(environment_factory=...) takes it: its methods are "
                  "JSON tool calls in the model's chat template, its get_reward the reward unless reward_funcs is set."},
    )
    search_corpus: str | None = field(
        default=None,
        metadata={"help": "The search tool's passages: a JSONL file, one {\"text\": ..., \"title\": ...} a line "
                  "(title optional). Default: the task's corpus (two_hop ships one)."},
    )
    python_timeout: float = field(default=10.0, metadata={"help": "Seconds per <python> call."})
    reward: str = field(
        default="rapo_outcome",
        metadata={"help": "rapo_outcome, f1, exact_match, math, or an import path (pkg.module.fn) to a reward function."},
    )
    reward_funcs: list[str] | None = field(
        default=None,
        metadata={"help": "train: several rewards, as `trl grpo` takes them: built-in names or import paths "
                  "(pkg.module.fn), weighted by reward_weights. Replaces reward."},
    )
    closeness_weight: float = field(
        default=0.0,
        metadata={"help": "train: add numeric closeness of the answer (1 at the gold value, 0 an order of magnitude "
                  "away) to the training reward with this weight; 0: off. Evaluation stays exact."},
    )
    store_path: str = field(default="runs/store", metadata={"help": "Folder of the embedded Chroma trace store."})
    store_collection: str = field(default="traces", metadata={"help": "Collection inside the store."})
    store_server: str | None = field(default=None, metadata={"help": "host:port of a `chroma run` server."})
    allow_empty_store: bool = field(
        default=False,
        metadata={"help": "train: take an empty store (retrieval inserts only the fallback text) instead of refusing it."},
    )
    agent: str = field(default="expert", metadata={"help": "build-store agent: 'expert' or a model path."})
    expert_error_rate: float = field(default=0.2, metadata={"help": "Share of wrong expert trajectories."})
    num_samples: int = field(default=4, metadata={"help": "build-store: trajectories per question (paper 16)."})
    keep_top_k: int = field(default=2, metadata={"help": "build-store: best trajectories kept (paper 5)."})
    eval_model: str | None = field(
        default=None,
        metadata={"help": "eval: model or adapter folder (default output_dir), or an alias: smollm2, or tiny (an "
                  "untrained tiny model that answers nothing right: a smoke test of the command)."},
    )
    eval_base: bool = field(default=True, metadata={"help": "eval: also evaluate the base model, side by side."})
    eval_batch_size: int = field(default=32, metadata={"help": "eval: rows generated together."})
    eval_processes: int = field(
        default=1,
        metadata={"help": "eval: models scored at once, each in a process of its own with an equal share of this "
                  "process's torch threads (1: one model after another, here). Each process holds one model."},
    )
    eval_report: str | None = field(
        default=None, metadata={"help": "eval: also write the results JSON to this path, and beside it the markdown "
                                 "table (the path with .md for its suffix, so the path cannot end in .md)."}
    )
    sft_same_time: bool = field(
        default=False,
        metadata={"help": "train: also SFT the warm start further for as long as RAPO trained (the fair baseline)."},
    )
    grpo_same_rollouts: bool = field(
        default=False,
        metadata={"help": "train: after RAPO, also train GRPO (this recipe with retrieval off: no hybrid rows) from "
                  "the same warm start, seed and questions, with as many rollouts and steps, saved in "
                  "grpo-same-rollouts/: the baseline that says whether retrieval helped."},
    )
    grpo_alongside: bool = field(
        default=False,
        metadata={"help": "train, with grpo_same_rollouts: train the GRPO baseline in a second process while RAPO "
                  "trains, from the same start (neither SFT stage runs twice), each process with half of the CPU "
                  "cores as torch threads; on a GPU both share it. The baseline trains the recipe's max_steps (or "
                  "epochs), not the steps RAPO took: it cannot know them in advance."},
    )
    device: str | None = field(
        default=None,
        metadata={"help": "eval, build-store: where the model runs (cuda, cuda:N, mps, cpu). Default: the GPU when "
                  f"there is one (CUDA, else MPS), else the CPU. Precision: {PRECISION_RULE}. train follows use_cpu."},
    )
    sft_warmup_steps: int = field(
        default=0, metadata={"help": "train: SFT steps on the store's best trajectories before RAPO (0: none)."}
    )
    sft_learning_rate: float = field(default=2e-4, metadata={"help": "train: learning rate of the SFT warm start."})
    sft_store_steps: int = field(
        default=0,
        metadata={"help": "train: SFT steps on the trace store's best trajectories of RL's own questions (the steps "
                  "retrieval would show), after the warm start and before RL: SFT-then-RL, the off-policy baseline "
                  "(0: none). Saved in sft-on-store/."},
    )
    sft_retrieved_share: float = field(
        default=0.0,
        metadata={"help": "train: share of the warm start's questions given a second example in which a step of their "
                  "stored trajectory arrives as a retrieved block (left out of the loss) after its plan or a tool "
                  "step, and the trajectory goes on after it, so the policy learns to continue after a "
                  "retrieval instead of answering at once (0: none)."},
    )
    sft_seed: int | None = field(
        default=None,
        metadata={"help": "train: seed of the SFT stages (default: seed). One value across runs of several seeds "
                  "gives them one warm start, so only RL's sampling differs."},
    )
    sft_batch_size: int = field(default=4, metadata={"help": "train: trajectories per SFT warm-start step."})
    base_model_name: str | None = field(
        default=None,
        metadata={"help": "train: the base model's name for the card and the pushed adapter (e.g. the hub id of a "
                  "model loaded from a local folder). Default: the hub id model_name_or_path was given as (or an "
                  "alias's), else the local folder's absolute path."},
    )
    push_warm_start: bool = field(
        default=False,
        metadata={"help": "train, push_to_hub: also upload sft-warm-start/ (the warm start's adapter, or its merged "
                  "model without LoRA) and sft-same-time/. The pushed adapter carries the warm start either way."},
    )


def name_list(value, default) -> list[str]:
    """A recipe's list field (a YAML list or one name); ``default`` when unset."""
    if value is None:
        return list(default)
    return [value] if isinstance(value, str) else list(value)


def _matches(value, hint) -> bool:
    """A loose isinstance for YAML values against a dataclass annotation."""
    if isinstance(hint, str) or hint is typing.Any:
        return True
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in typing.get_args(hint))
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if origin in (list, tuple):
        if isinstance(value, str):  # one name for a list of names
            return True
        items = typing.get_args(hint)
        return isinstance(value, (list, tuple)) and (
            len(items) != 1 or all(_matches(item, items[0]) for item in value))
    if origin is dict:
        return isinstance(value, (dict, str))
    if hint is type(None):
        return value is None
    if hint is float:
        if isinstance(value, str):  # YAML 1.1 reads `1e-4` (no dot) as a string; argparse converts it
            try:
                float(value)
            except ValueError:
                return False
            return True
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is bool:
        return isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    return True


def _members(hint) -> tuple:
    return typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)


def _number_list(hint) -> bool:
    """``list[float]`` (or ``list[float] | None``): the fields whose YAML items may be YAML 1.1 float text."""
    return any(typing.get_origin(member) is list and typing.get_args(member) == (float,) for member in _members(hint))


def _list_only(hint) -> bool:
    """A list field that takes no single string (``lora_modules_to_save``; not ``report_to``, ``str | list[str]``)."""
    members = _members(hint)
    return str not in members and any(typing.get_origin(member) is list for member in members)


def yaml_values(config: dict, hints: dict) -> dict:
    """``config`` as the command line gives it. One name for a list field becomes a list of that name: the dataclass
    would keep the string, which PEFT reads letter by letter (``lora_modules_to_save: lm_head``). The items of number
    lists become numbers: YAML 1.1 reads ``1e-1`` (no dot) as text, which argparse converts for a float field but
    leaves as it is in a list (``reward_weights: [1e-1, 1]``)."""
    values = {}
    for key, value in config.items():
        hint = hints.get(key)
        if isinstance(value, str) and _list_only(hint):
            value = [value]
        if isinstance(value, list) and _number_list(hint):
            value = [float(item) if isinstance(item, str) else item for item in value]
        values[key] = value
    return values


def _type_name(hint) -> str:
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")


def check_config_types(config: dict, dataclass_types, command: str = "train") -> None:
    """Refuse unknown keys and values of the wrong type in a YAML config, naming the key."""
    hints = {}
    for cls in dataclass_types:
        class_hints = typing.get_type_hints(cls)
        for f in fields(cls):
            hints.setdefault(f.name, class_hints.get(f.name, typing.Any))
    check_config_hints(config, hints, command)


def _yaml_boolean_hint(key: str) -> str:
    """What to write instead when YAML read a word meant as text as a boolean."""
    return f" (YAML reads an unquoted no, yes, on, off, true or false as a boolean: put the text in quotes, {key}: \"...\")"


def check_config_hints(config: dict, hints: dict, command: str = "train") -> None:
    """`check_config_types` against ``name -> type hint`` (the recipe's fields, read without importing them)."""
    from rapo_trl.cli.parsing import closest, replaced_field

    for key, value in config.items():
        if key == "env":
            continue
        if key not in hints and replaced_field(key):
            raise ValueError(f"config key '{key}': {replaced_field(key)}")
        if key not in hints:
            close = closest(key, hints)
            raise ValueError(f"unknown key '{key}' in the config; check its spelling"
                             + (f" (did you mean '{close}'?)" if close else "")
                             + f"; `rapo {command} --help-all` lists every field")
        if not _matches(value, hints[key]):
            raise ValueError(
                f"config key '{key}' = {value!r} has the wrong type; expected {_type_name(hints[key])}"
                + (_yaml_boolean_hint(key) if isinstance(value, bool) and _matches("text", hints[key]) else "")
            )
