"""``rapo push RUN``: push a trained run as ``rapo train --push_to_hub`` does, e.g. again after a push that failed."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(subparsers) -> None:
    from rapo_trl.cli.recipe import _to_bool as to_bool

    push = subparsers.add_parser("push", help="Push a trained run to the Hub as `rapo train --push_to_hub` does "
                                              "(e.g. to retry a push that failed).")
    push.add_argument("run", help="The run's output_dir.")
    push.add_argument("--hub_model_id", default=None, help="The model repo (default: the run folder's name).")
    push.add_argument("--base_model_name", default=None,
                      help="What the adapter names as its base (default: what the run recorded).")
    # `--flag`, `--flag true` or `--flag false`, as the recipe commands (and `rapo train`'s same flags) take them
    flag = {"type": to_bool, "nargs": "?", "const": True, "default": False, "metavar": "BOOL"}
    push.add_argument("--push_warm_start", **flag, help="Also push the SFT warm-start folders.")
    push.add_argument("--hub_token", default=None, help="Token to push with (default: the saved login).")
    push.add_argument("--hub_private_repo", **flag, help="Create the repo private.")
    push.add_argument("--hub_revision", default=None, help="The branch to push to.")


def run(args: argparse.Namespace) -> str:
    from rapo_trl.cli.errors import UsageError
    from rapo_trl.cli.push import check_can_push, check_pushable, check_repo_id, push_run

    if not (Path(args.run) / "config.json").is_file() and not (Path(args.run) / "adapter_config.json").is_file():
        raise UsageError(f"{args.run} is no trained run (no config.json or adapter_config.json); give a `rapo train` "
                         "output_dir")
    check_repo_id(args.hub_model_id, args.run)
    check_pushable(args.run)
    check_can_push(args.hub_token)
    repo, base = push_run(args.run, args.hub_model_id, args.base_model_name, include_warm_start=args.push_warm_start,
                          token=args.hub_token, private=args.hub_private_repo or None, revision=args.hub_revision)
    print(f"Pushed {args.run} to https://huggingface.co/{repo} (adapter base: {base}).")
    return repo
