"""``rapo plot RUN``: redraw a run's PNG plots from its logged history."""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> None:
    plot = subparsers.add_parser(
        "plot", help="Redraw a run's plots (reward, pass@1, retrieval rate, Z, F_ret) from its logged history."
    )
    plot.add_argument("run", help="Training output folder (holding trainer_state.json) or a trainer_state.json.")
    plot.add_argument("--out", default=None, help="Folder for the PNGs (default: RUN/plots).")
    plot.add_argument("--dpi", type=int, default=120, help="Resolution of the PNGs, in dots per inch (default: 120).")


def run(args: argparse.Namespace) -> list:
    from rapo_trl.plots import plot_run

    written = plot_run(args.run, args.out, dpi=args.dpi)
    for path in written:
        print(path)
    return written
