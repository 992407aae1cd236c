"""The ``rapo`` command: build-store, train, eval (YAML recipe + CLI overrides, as ``trl grpo``) and store."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings

from rapo_trl import __version__

RECIPE_COMMANDS = {
    "build-store": "Fill a trace store with an off-policy agent's step traces.",
    "train": "Train with RAPOTrainer from a YAML recipe.",
    "eval": "Evaluate with tools and without retrieval (trained and base model side by side).",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rapo",
        description="RAPO (Retrieval-Augmented Policy Optimization) on Hugging Face TRL.",
        epilog="Recipe commands take --config FILE.yaml plus --field value overrides; `rapo COMMAND --help`.",
    )
    parser.add_argument("--version", action="version", version=f"rapo_trl {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in RECIPE_COMMANDS.items():
        subparsers.add_parser(name, help=help_text, add_help=False)
    from rapo_trl.cli import plot_command, store_commands

    store_commands.add_parser(subparsers)
    plot_command.add_parser(subparsers)
    return parser


def _read_config(argv: list[str]) -> tuple[str, dict] | None:
    """``(path, mapping)`` of the ``--config`` YAML, read before TRL is imported so a bad file fails fast."""
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


def parse_recipe(command: str, argv: list[str]):
    """``(script, rapo_config, model_config)`` from ``--config`` YAML and CLI overrides."""
    # TrlParser only knows `--config PATH`; accept `--config=PATH` too.
    argv = [part for arg in argv for part in (arg.split("=", 1) if arg.startswith("--config=") else [arg])]
    found = _read_config(argv)

    from trl import ModelConfig, TrlParser

    from rapo_trl.cli.arguments import RAPOScriptArguments, check_config_types
    from rapo_trl.config import RAPOConfig

    class RecipeParser(TrlParser):
        def error(self, message):  # one line, not argparse's usage of every TrainingArguments field
            self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")

    types = (RAPOScriptArguments, RAPOConfig, ModelConfig)
    if found is not None:
        check_config_types(found[1], types)
    # TrlParser takes `--config PATH` out of argv itself and never declares it; declare it (first, via a
    # parent parser) so `--help` shows it. SUPPRESS: it never reaches the namespace the dataclasses are built from.
    config_option = argparse.ArgumentParser(add_help=False)
    config_option.add_argument(
        "--config", metavar="FILE.yaml", default=argparse.SUPPRESS,
        help="YAML recipe: any field below as `field: value` (e.g. configs/*.yaml); flags given here override it.",
    )
    parser = RecipeParser(types, prog=f"rapo {command}", description=RECIPE_COMMANDS[command],
                          parents=[config_option])
    script, rapo_config, model_config = parser.parse_args_and_config(argv)
    from rapo_trl.cli.common import check_script_arguments

    check_script_arguments(command, script)
    return script, rapo_config, model_config


def _run_recipe(command: str, argv: list[str]):
    from rapo_trl.cli import build_store, evaluate, train

    script, rapo_args, model_args = parse_recipe(command, argv)
    runner = {"build-store": build_store.run, "train": train.run, "eval": evaluate.run}[command]
    return runner(script, rapo_args, model_args)


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    # TRL's configs default `gradient_checkpointing`, which transformers now warns is a deprecated alias:
    # noise on every command that says nothing about the user's recipe.
    warnings.filterwarnings("ignore", message=r"`(is_)?gradient_checkpointing\w*` is deprecated", category=FutureWarning)
    if argv and argv[0] in RECIPE_COMMANDS:
        command, rest = argv[0], argv[1:]
        try:
            _run_recipe(command, rest)  # `--help` prints the recipe's fields and exits
        except SystemExit:
            raise
        except Exception as error:  # noqa: BLE001 - one clear line, not a traceback, for user errors
            if logging.getLogger().isEnabledFor(logging.DEBUG) or "RAPO_TRACEBACK" in os.environ:
                raise
            print(f"rapo {command}: error: {_one_line(error)}", file=sys.stderr)
            return 2
        return 0
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "store":
        from rapo_trl.cli import store_commands

        try:
            store_commands.run(args)
        except Exception as error:  # noqa: BLE001
            print(f"rapo store: error: {_one_line(error)}", file=sys.stderr)
            return 2
    if args.command == "plot":
        from rapo_trl.cli import plot_command

        try:
            plot_command.run(args)
        except Exception as error:  # noqa: BLE001
            print(f"rapo plot: error: {_one_line(error)}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
