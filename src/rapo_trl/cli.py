"""The ``rapo`` command."""

from __future__ import annotations

import argparse
import sys

from rapo_trl import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rapo",
        description="RAPO (Retrieval-Augmented Policy Optimization) on Hugging Face TRL.",
    )
    parser.add_argument("--version", action="version", version=f"rapo_trl {__version__}")
    parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
