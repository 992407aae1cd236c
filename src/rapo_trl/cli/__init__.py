"""The ``rapo`` command: build-store, train, eval (YAML recipe + CLI overrides, as ``trl grpo``) and store."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from rapo_trl import __version__
from rapo_trl.cli.console import configure_console
from rapo_trl.cli.errors import TRACEBACK_ENV, report
from rapo_trl.cli.parsing import ArgumentParser
from rapo_trl.cli.recipe import (
    RECIPE_COMMANDS,
    ignored_flags,
    parse_checked_recipe,
    parse_recipe,  # noqa: F401 - for Python callers: read_recipe's checks, then TRL's parse
    read_recipe,
)


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="rapo",
        description="RAPO (Retrieval-Augmented Policy Optimization) on Hugging Face TRL.",
        epilog="Recipe commands take --config FILE.yaml plus --field value overrides; `rapo COMMAND --help`. "
               "A usage error is one line, an error raised in your own code (reward, tool, dataset) shows your "
               f"code's frames; set {TRACEBACK_ENV}=1 in the environment for the full traceback.",
    )
    parser.add_argument("--version", action="version", version=f"rapo_trl {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in RECIPE_COMMANDS.items():
        subparsers.add_parser(name, help=help_text, add_help=False)
    from rapo_trl.cli import plot_command, push_command, store_commands

    store_commands.add_parser(subparsers)
    plot_command.add_parser(subparsers)
    push_command.add_parser(subparsers)
    return parser


def _run_recipe(command: str, argv: list[str]):
    from rapo_trl.cli import build_store, evaluate, train

    module = {"build-store": build_store, "train": train, "eval": evaluate}[command]
    for flag, reader in ignored_flags(command, argv):
        logging.getLogger("rapo_trl.cli").warning("rapo %s: %s is read by `rapo %s` only; this command ignores it",
                                                  command, flag, reader)
    # Everything that can be checked without TRL, torch or a model (the recipe, the store, the model's
    # whereabouts) is, first: a mistake answers in a second, not after the imports and a model load.
    module.check(*read_recipe(command, argv))
    return module.run(*parse_checked_recipe(command, argv), checked=True)


def _wants_traceback() -> bool:
    return logging.getLogger().isEnabledFor(logging.DEBUG) or TRACEBACK_ENV in os.environ


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    configure_console()
    if argv and argv[0] in RECIPE_COMMANDS:
        command, rest = argv[0], argv[1:]
        try:
            _run_recipe(command, rest)  # `--help` prints the recipe's fields and exits
        except SystemExit:
            raise
        except Exception as error:  # noqa: BLE001 - one line for a usage error; the user's frames for their bug
            if _wants_traceback():
                raise
            return report(command, error)
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
            if _wants_traceback():
                raise
            return report("store", error)
    if args.command in ("plot", "push"):
        from rapo_trl.cli import plot_command, push_command

        try:
            {"plot": plot_command, "push": push_command}[args.command].run(args)
        except Exception as error:  # noqa: BLE001
            if _wants_traceback():
                raise
            return report(args.command, error)
    return 0


if __name__ == "__main__":
    sys.exit(main())
