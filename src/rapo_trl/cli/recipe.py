"""A recipe command's command line: ``--config FILE.yaml`` plus ``--field value`` overrides, as ``trl grpo``.

It is read twice. First without TRL or torch (`read_recipe`): the help, a bad YAML, an unknown key or flag
and a value of the wrong type answer at once. Then, when the command runs, by TRL's own `TrlParser` into
the real dataclasses (`parse_recipe`).
"""

from __future__ import annotations

import argparse
import types
import typing

from rapo_trl.cli.fields import MODEL, SCRIPT, TRAINING, FieldSpec, recipe_fields
from rapo_trl.cli.parsing import ArgumentParser, option_names
from rapo_trl.hardware import PRECISION_RULE

RECIPE_COMMANDS = {
    "build-store": "Fill a trace store with an off-policy agent's step traces.",
    "train": "Train with RAPOTrainer from a YAML recipe.",
    "eval": "Evaluate with tools and without retrieval (trained and base model side by side).",
}
HELP_FLAGS = ("-h", "--help", "--help-all")

# TRL's ModelConfig flags that say how a model loads; every model a command loads gets them.
MODEL_LOADING = ("model_revision", "dtype", "attn_implementation", "trust_remote_code", "load_in_4bit", "load_in_8bit",
                 "bnb_4bit_quant_type", "use_bnb_nested_quant", "model_init_kwargs")
TASK = ("task", "dataset_path", "dataset_name", "dataset_config", "dataset_train_split", "dataset_test_split",
        "eval_dataset_path", "eval_fraction", "question_column", "answer_column", "task_seed", "tools", "search_corpus",
        "python_timeout")
TRAINING_SPLITS = ("train_size", "task_difficulty", "train_split", "demo_split", "store_split")
RAPO = "RAPO"  # the group of the fields RAPOConfig declares itself

# `rapo COMMAND --help`: the fields the command reads, grouped; `--help-all` adds every other one.
HELP_GROUPS = {
    "train": (
        ("model", ("model_name_or_path", *MODEL_LOADING, "use_peft", "lora_r", "lora_alpha", "lora_dropout",
                   "lora_target_modules")),
        ("task", (*TASK, *TRAINING_SPLITS, "reward", "reward_funcs", "closeness_weight")),
        ("store", ("store_path", "store_collection", "store_server")),
        (RAPO, ()),
        ("SFT warm start", ("sft_warmup_steps", "sft_learning_rate", "sft_batch_size", "sft_retrieved_share")),
        ("baselines", ("sft_same_time", "grpo_same_rollouts", "grpo_alongside", "sft_store_steps")),
        ("training", ("output_dir", "max_steps", "num_train_epochs", "learning_rate", "per_device_train_batch_size",
                      "gradient_accumulation_steps", "steps_per_generation", "num_generations", "max_completion_length",
                      "temperature", "reward_weights", "use_vllm", "use_cpu", "device", "bf16", "fp16", "seed",
                      "logging_steps", "save_strategy", "save_steps", "report_to", "resume_from_checkpoint",
                      "push_to_hub", "hub_model_id", "base_model_name", "push_warm_start")),
    ),
    "build-store": (
        ("agent", ("agent", "expert_error_rate", "device", *MODEL_LOADING)),
        ("task", (*TASK, *TRAINING_SPLITS, "task_tool_steps", "reward")),  # only the expert reads tool steps
        ("store", ("store_path", "store_collection", "store_server", "num_samples", "keep_top_k", "sft_warmup_steps")),
        ("rollouts", ("max_completion_length", "max_turn_tokens", "max_tool_calls", "temperature", "seed")),
    ),
    "eval": (
        ("models", ("eval_model", "output_dir", "model_name_or_path", "eval_base", "device", *MODEL_LOADING)),
        ("task", (*TASK, "eval_size", "eval_difficulty", "eval_splits")),
        ("evaluation", ("eval_batch_size", "eval_processes", "eval_scoring", "eval_samples", "eval_temperature",
                        "eval_sample_size", "eval_sampled_splits", "eval_models", "eval_sampled_models", "eval_report",
                        "max_completion_length", "max_turn_tokens", "temperature", "top_p", "top_k", "min_p",
                        "repetition_penalty", "generation_kwargs", "seed")),
    ),
}
HELP_TEXT = {  # where the command's meaning differs from the dataclass's own help
    "resume_from_checkpoint": "A checkpoint folder to resume from; the flag alone (or true): the newest whole one.",
    "dtype": "Load the models in this dtype: auto, bfloat16, float16 or float32. Unset: train loads float32 (TRL's "
             "default; bf16/fp16 mixed precision on top; with LoRA the frozen weights load in that half type), eval "
             f"and build-store follow the device: {PRECISION_RULE}.",
}
DEFAULTS = {"dtype": None}  # unset dtype: see HELP_TEXT (ModelConfig's own default is float32)
BARE_FLAGS = {"resume_from_checkpoint": "true"}
"""Fields whose flag may come without a value, and what it then means: ``--resume_from_checkpoint`` alone resumes
from the newest whole checkpoint, as ``Trainer.train(resume_from_checkpoint=True)``."""


ONLY_READ_BY = {
    "eval": ("eval_model", "eval_base", "eval_batch_size", "eval_processes", "eval_report", "eval_samples",
             "eval_temperature", "eval_sample_size", "eval_sampled_splits", "eval_models", "eval_sampled_models",
             "eval_scoring"),
    "build-store": ("num_samples", "keep_top_k", "expert_error_rate"),
    "train": ("learning_rate", "max_steps", "num_train_epochs", "per_device_train_batch_size",
              "gradient_accumulation_steps", "steps_per_generation", "num_generations", "beta", "loss_type", "epsilon",
              "logging_steps", "save_strategy", "save_steps", "report_to", "resume_from_checkpoint", "push_to_hub",
              "hub_model_id", "use_vllm", "use_cpu", "bf16", "fp16", "use_peft", "lora_r", "lora_alpha",
              "lora_dropout", "lora_target_modules", "retrieve_prob", "retrieve_prob_final", "num_hybrid_generations",
              "retrieve_at", "retrieve_failed_groups_max_reward", "retrieval_advantage_weight",
              "importance_shaping_weight", "retrieved_token_loss_weight", "store_growth_min_reward",
              "dynamic_sampling_max_rounds", "allow_empty_store", "sft_learning_rate", "sft_store_steps",
              "sft_retrieved_share", "sft_seed", "sft_batch_size", "sft_same_time", "grpo_same_rollouts",
              "grpo_alongside", "base_model_name", "push_warm_start"),
}
"""Fields only one command reads (train's: those a user plausibly gives eval or build-store, which place their model
with ``device``, not ``use_cpu``). In the YAML (one recipe for every command) they are at home; on another command's
command line they do nothing, which `ignored_flags` says."""


def ignored_flags(command: str, argv: list[str]) -> list[tuple[str, str]]:
    """``(flag, command that reads it)`` for each flag of ``argv`` that only another command reads."""
    given = [arg.split("=", 1)[0] for arg in argv if arg.startswith("--")]
    return [(flag, reader) for flag in given for reader, names in ONLY_READ_BY.items()
            if reader != command and flag[2:].replace("-", "_") in names]


def help_groups(command: str) -> list[tuple[str, list[str]]]:
    """``(title, field names)`` of the command's help; the RAPO group is what RAPOConfig declares, less the
    fields another group shows."""
    listed = {name for _, names in HELP_GROUPS[command] for name in names}
    rapo = [name for name, spec in recipe_fields().items() if spec.declared_in == "RAPOConfig" and name not in listed]
    return [(title, list(rapo if title == RAPO else names)) for title, names in HELP_GROUPS[command]]


class _HelpAll(argparse.Action):
    """``--help-all``: the help with every field, then exit (as ``--help`` does)."""

    def __init__(self, option_strings, dest, command: str, **kwargs):
        super().__init__(option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, **kwargs)
        self.command = command

    def __call__(self, parser, namespace, values, option_string=None):
        recipe_parser(self.command, everything=True).print_help()
        parser.exit()


def recipe_parser(command: str, everything: bool = False) -> ArgumentParser:
    """The command line of ``rapo COMMAND``; its help shows the command's fields, or ``everything``."""
    parser = ArgumentParser(
        prog=f"rapo {command}", description=RECIPE_COMMANDS[command],
        usage=f"rapo {command} [-h] [--config FILE.yaml] [--help-all] [--FIELD VALUE ...]",
        epilog=None if everything else (
            "Every field of RAPOConfig (TRL's GRPOConfig, transformers' TrainingArguments), TRL's ModelConfig and "
            f"the other rapo commands is accepted too, as --name value or `name: value` in the YAML: `rapo {command} "
            "--help-all` lists them all."),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--config", metavar="FILE.yaml", default=argparse.SUPPRESS,
                        help="YAML recipe: any field as `field: value` (e.g. configs/*.yaml); flags given here override it.")
    parser.add_argument("--help-all", action=_HelpAll, command=command, help="List every field, not only this command's.")
    fields = recipe_fields()
    shown = set()
    for title, names in help_groups(command):
        group = parser.add_argument_group(title)
        for name in names:
            _add_field(group, fields[name], shown=True)
            shown.add(name)
    rest = parser.add_argument_group("every other field") if everything else parser
    for name, spec in fields.items():
        if name not in shown:
            _add_field(rest, spec, shown=everything)
    parser.set_defaults(**DEFAULTS)
    return parser


def _add_field(parser, spec: FieldSpec, shown: bool) -> None:
    """``--name`` (and ``--name-with-dashes``) as HfArgumentParser declares a dataclass field."""
    kwargs = {**spec.metadata, **_conversion(spec.hint), "default": spec.default}
    if spec.name in BARE_FLAGS:
        kwargs.update(nargs="?", const=BARE_FLAGS[spec.name])
    kwargs["help"] = HELP_TEXT.get(spec.name, kwargs.get("help")) if shown else argparse.SUPPRESS
    parser.add_argument(*option_names(spec.name), **kwargs)
    if spec.default is True and kwargs.get("const") is True:  # HfArgumentParser's `--no_x` for a flag that is on
        parser.add_argument(*option_names(f"no_{spec.name}"), action="store_false", dest=spec.name,
                            help=argparse.SUPPRESS)


def _conversion(hint) -> dict:
    """argparse's ``type``/``nargs`` for a field, as HfArgumentParser converts it. Where that keeps a string (a
    union with str, dicts, enums), no conversion here: TRL's parser checks those when the command runs."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        members = [arg for arg in args if arg is not type(None)]
    else:
        members = [hint]
    if bool in members:
        return {"type": _to_bool, "nargs": "?", "const": True}  # a bare `--bf16` is true, for `bool | None` too
    lists = [member for member in members if typing.get_origin(member) is list]
    if lists and str in members and len(members) < len(args):
        return {"action": _OneValue}
    if lists:  # `str | list[str]` (TrainingArguments.debug) takes several values, as in HfArgumentParser
        (item,) = typing.get_args(lists[0]) or (str,)
        return {"type": item if item in (int, float) and len(members) == 1 else str, "nargs": "+"}
    if str in members or len(members) != 1:
        return {}
    (member,) = members
    if member in (int, float):
        return {"type": _or_none(member) if len(members) < len(args) else member}
    return {}


class _OneValue(argparse.Action):
    """A ``None | str | list[str]`` field (``report_to``): TRL's parser reads it as one string, so several values fail
    there, after TRL's import, as arguments not used. Refused here in a line that says where a list goes."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs="+", **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        if len(values) > 1:
            raise argparse.ArgumentError(self, f"takes one value on the command line, as in `trl grpo`; give several "
                                               f"in the YAML recipe: {self.dest}: [{', '.join(values)}]")
        setattr(namespace, self.dest, values[0])


def _to_bool(text):
    if isinstance(text, bool):
        return text
    if text.lower() in ("yes", "true", "t", "y", "1"):
        return True
    if text.lower() in ("no", "false", "f", "n", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false (yes/no, 1/0), got '{text}'")


def _or_none(kind):
    def convert(text: str):
        return None if text.lower() in ("none", "null") else kind(text)

    convert.__name__ = kind.__name__  # argparse's "invalid int value: 'ten'" names the type
    return convert


def split_config_equals(argv: list[str]) -> list[str]:
    """TrlParser only knows ``--config PATH``; accept ``--config=PATH`` too."""
    return [part for arg in argv for part in (arg.split("=", 1) if arg.startswith("--config=") else [arg])]


def read_config(argv: list[str]) -> tuple[str, dict] | None:
    """``(path, mapping)`` of the ``--config`` YAML, or None without one."""
    import yaml

    if "--config" not in argv:
        return None
    if argv.count("--config") > 1:
        raise ValueError("--config given more than once; give one YAML recipe (override its fields with flags)")
    index = argv.index("--config")
    if index + 1 >= len(argv):
        raise ValueError("--config needs the path of a YAML file")
    path = argv[index + 1]
    try:
        with open(path) as handle:
            config = yaml.safe_load(handle)
    except OSError as error:
        raise ValueError(f"cannot read config {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise ValueError(f"config {path} is not valid YAML: {' '.join(str(error).split())}") from None
    if not isinstance(config, dict):
        raise ValueError(f"config {path} must be a YAML mapping of field: value")
    return path, config


def apply_env(path: str, config: dict) -> None:
    """Set the recipe's ``env:`` variables now, as TrlParser would, but before anything reads them: libraries read
    some at import (huggingface_hub's ``HF_HUB_OFFLINE``, ``HF_HOME``), and TRL's parser sets them only after TRL,
    transformers and huggingface_hub are imported, where they would be set yet silently ignored."""
    import os

    env = config.get("env", {})
    if not isinstance(env, dict):
        raise ValueError(f"config {path}: `env` must be a mapping of VARIABLE: value, got {env!r}")
    for key, value in env.items():
        os.environ[str(key)] = str(value)


def read_recipe(command: str, argv: list[str]):
    """``(script, training, model)``: `RAPOScriptArguments` and namespaces of the RAPOConfig and ModelConfig
    fields, read without TRL or torch. A help request prints and exits; bad input raises one clear line."""
    from rapo_trl.cli.arguments import RAPOScriptArguments, check_config_hints, yaml_values
    from rapo_trl.cli.common import check_script_arguments

    argv = split_config_equals(argv)
    parser = recipe_parser(command)
    asked = [arg for arg in argv if arg in HELP_FLAGS]
    if asked:
        parser.parse_args(asked[:1])  # the help comes first, whatever else is wrong; it exits
    found = read_config(argv)
    fields = recipe_fields()
    if found is not None:
        apply_env(*found)
        config = {key: value for key, value in found[1].items() if key != "env"}  # TrlParser sets `env` itself
        hints = {name: spec.hint for name, spec in fields.items()}
        check_config_hints(config, hints, command)
        parser.set_defaults(**yaml_values(config, hints))
    values = vars(parser.parse_args(argv))
    values.pop("config", None)
    parts = {owner: {name: value for name, value in values.items() if fields[name].dataclass == owner}
             for owner in (SCRIPT, TRAINING, MODEL)}
    script = RAPOScriptArguments(**parts[SCRIPT])
    check_script_arguments(command, script)
    from rapo_trl.ranges import out_of_range

    refused = out_of_range(parts[TRAINING])
    if refused:
        raise ValueError(refused)
    return script, argparse.Namespace(**parts[TRAINING]), argparse.Namespace(**parts[MODEL])


def parse_recipe(command: str, argv: list[str]):
    """``(script, rapo_config, model_config)``: the real dataclasses from ``--config`` YAML and CLI overrides,
    parsed by TRL's `TrlParser` once `read_recipe` found the command line sound."""
    read_recipe(command, argv)
    return parse_checked_recipe(command, argv)


def parse_checked_recipe(command: str, argv: list[str]):
    """`parse_recipe` for a command line `read_recipe` has already checked, as the ``rapo`` command does before TRL
    imports: reading it again would repeat every check (and read a JSONL dataset again)."""
    argv = split_config_equals(argv)
    from trl import ModelConfig, TrlParser

    from rapo_trl.cli.arguments import RAPOScriptArguments, yaml_values
    from rapo_trl.config import RAPOConfig

    class RecipeParser(TrlParser, ArgumentParser):  # TRL's parsing; our exact names and one-line errors
        @staticmethod
        def _parse_dataclass_field(parser, field):
            TrlParser._parse_dataclass_field(parser, field)
            # TRL's parser wants a value after a `bool | None` flag (`--bf16 true`); transformers' takes `--bf16`.
            const = True if bool in typing.get_args(field.type) else BARE_FLAGS.get(field.name)
            if const is not None:
                for action in parser._actions:
                    if f"--{field.name}" in action.option_strings and action.nargs is None:
                        action.nargs, action.const = "?", const

        def set_defaults_with_config(self, **config):  # the YAML's values as read_recipe reads them
            hints = {name: spec.hint for name, spec in recipe_fields().items()}
            return super().set_defaults_with_config(**yaml_values(config, hints))

    parser = RecipeParser((RAPOScriptArguments, RAPOConfig, ModelConfig), prog=f"rapo {command}")
    parser.set_defaults(**DEFAULTS)
    return parser.parse_args_and_config(argv)
