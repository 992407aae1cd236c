"""PNG plots of a RAPO run, drawn from TRL's logged history (``trainer.state.log_history``).

``plot_run(folder)`` reads ``trainer_state.json`` (written by ``rapo train``, or any checkpoint's) and,
when present, ``rapo eval``'s ``eval_results.json``; it writes one PNG per quantity plus an overview:

- ``reward.png``: mean training reward per step, with its spread across rollouts;
- ``pass_at_1.png``: held-out pass@1 when the run was evaluated (logged ``*pass@1`` keys, and the base
  and trained scores of ``rapo eval``);
- ``retrieval_rate.png``: share of hybrid rollouts that retrieved, and the share of fallback inserts;
- ``retrieval_reward.png``: RAPO's retrieval reward Z over the retrieving rollouts (mean and spread);
- ``f_ret.png``: F_ret, the retrieved share of the response tokens that shapes the importance ratio;
- ``summary.png``: all of the above that have data, side by side.
"""

from __future__ import annotations

import json
import logging
import math
import re
from dataclasses import dataclass
from pathlib import Path

from rapo_trl.saved_checkpoints import checkpoint_saved_last, highest_whole_checkpoint, recorded_run

PLOTS_DIR = "plots"
STATE_FILE = "trainer_state.json"
EVAL_FILE = "eval_results.json"
_PASS_AT_1 = re.compile(r"(^|[_/])pass@1$")
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Panel:
    """One figure: the logged keys it draws and how."""

    name: str
    """File stem of the PNG."""
    title: str
    ylabel: str
    keys: tuple[str, ...]
    """Logged keys drawn as lines (labels are the keys)."""
    spread: str | None = None
    """A logged standard deviation drawn as a band around the first key."""


PANELS = (
    Panel("reward", "Training reward", "reward", ("reward",), spread="reward_std"),
    Panel("retrieval_rate", "Retrieval in hybrid rollouts", "share",
          ("rapo/retrieval_rate", "rapo/fallback_rate")),
    Panel("retrieval_reward", "Retrieval reward Z (retrieving rollouts)", "Z", ("rapo/z_mean",),
          spread="rapo/z_std"),
    Panel("f_ret", "Retrieved share of response tokens F_ret", "F_ret", ("rapo/f_ret_mean",)),
)


def load_log_history(run) -> list[dict]:
    """The ``log_history`` of a run folder (its own ``trainer_state.json``, or that of the checkpoint saved last),
    of a ``trainer_state.json`` file, or of a list of log dicts (returned as is)."""
    if isinstance(run, list):
        return run
    path = Path(run)
    if path.is_dir():
        return _run_state(path)["log_history"]
    if not path.is_file():
        raise FileNotFoundError(f"run '{run}' is neither a training output folder nor a {STATE_FILE} file")
    return _read_state(path)["log_history"]


def _read_state(path: Path) -> dict:
    try:
        state = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON: {error}") from None
    if not isinstance(state, dict) or not isinstance(state.get("log_history"), list):
        raise ValueError(f"{path} has no log_history list; is it a transformers trainer_state.json?")
    return state


def _run_state(folder: Path) -> dict:
    """The state of a run folder: its own ``trainer_state.json`` (written at the end of training), unless the
    checkpoint saved last is of a later point of the run, or of another run saved since. The checkpoint is the one a
    bare resume would take (``checkpoint_saved_last``), not the highest-numbered: a run resumed from an earlier
    checkpoint saves lower steps than the ones it left behind."""
    saved_last = checkpoint_saved_last(str(folder))
    root = folder / STATE_FILE
    if not root.is_file():
        if saved_last is None:
            raise FileNotFoundError(
                f"no {STATE_FILE} in {folder} or its checkpoints; `rapo train` writes one at the end of training "
                "(from Python: trainer.save_state())"
            )
        highest = highest_whole_checkpoint(str(folder))
        if highest != saved_last:
            logger.warning("Drawing the history of %s, the checkpoint saved last; %s has a higher step but was saved "
                           "before it (a run resumed from an earlier checkpoint there since).", saved_last, highest)
        return _read_state(Path(saved_last) / STATE_FILE)
    state = _read_state(root)
    if saved_last is None:
        return state
    checkpoint = Path(saved_last) / STATE_FILE
    newest = _read_state(checkpoint)
    # The folder's own file is only rewritten when a run ends: a run resumed past it, or started over in the folder,
    # and stopped (or still going) has its history in its checkpoint, and the file would draw another run's steps.
    if _global_step(newest) > _global_step(state):
        why = f"it goes on to step {_global_step(newest)}, past the {_global_step(state)} of {root}"
    elif (newest["log_history"] != state["log_history"][: len(newest["log_history"])]
          and checkpoint.stat().st_mtime > root.stat().st_mtime):
        why = f"it was saved after {root}, of a run whose history it does not begin"
    else:
        return state
    logger.warning("Drawing the history of %s: %s (a run resumed or started over there since).", saved_last, why)
    return newest


def _global_step(state: dict) -> int:
    step = state.get("global_step")
    if isinstance(step, int) and not isinstance(step, bool):
        return step
    return max((int(e["step"]) for e in state["log_history"] if isinstance(e.get("step"), (int, float))), default=0)


def series(history: list[dict], key: str) -> tuple[list[int], list[float]]:
    """``(steps, values)`` of one logged key, skipping entries without it and non-finite values."""
    steps, values = [], []
    for entry in history:
        value = entry.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            steps.append(int(entry.get("step", len(steps))))
            values.append(float(value))
    return steps, values


def pass_at_1_keys(history: list[dict]) -> list[str]:
    """Logged keys that hold a held-out pass@1 (``eval_pass@1``, ``eval/pass@1``, ...), in first-seen order."""
    keys: dict[str, None] = {}
    for entry in history:
        for key in entry:
            if _PASS_AT_1.search(key):
                keys.setdefault(key)
    return list(keys)


def _figure(ncols: int = 1):
    import matplotlib

    matplotlib.use("Agg", force=True)  # files only: no display, same output on every machine
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=(4.2 * ncols, 3.2), squeeze=False)
    return plt, fig, list(axes[0])


def _draw_panel(ax, history: list[dict], panel: Panel) -> bool:
    drawn = False
    for key in panel.keys:
        steps, values = series(history, key)
        if not steps:
            continue
        drawn = True
        ax.plot(steps, values, marker="o", markersize=3, label=key)
        if panel.spread and key == panel.keys[0]:
            spread_steps, spread = series(history, panel.spread)
            by_step = dict(zip(spread_steps, spread))
            if by_step:
                low = [v - by_step.get(s, 0.0) for s, v in zip(steps, values)]
                high = [v + by_step.get(s, 0.0) for s, v in zip(steps, values)]
                ax.fill_between(steps, low, high, alpha=0.2, label=f"± {panel.spread}")
    if drawn:
        _style(ax, panel.title, panel.ylabel)
    return drawn


def _draw_pass_at_1(ax, history: list[dict], evaluation: dict | None) -> bool:
    drawn = False
    for key in pass_at_1_keys(history):
        steps, values = series(history, key)
        if steps:
            ax.plot(steps, values, marker="o", markersize=3, label=key)
            drawn = True
    results = evaluation_rows(evaluation)
    last_step = max((int(e.get("step", 0)) for e in history), default=0)
    markers = iter("s^Dv*Pxo")
    for name, metrics in results.items():  # the base model before training; every other model at the end
        value = (metrics or {}).get("pass@1")
        if isinstance(value, (int, float)):
            x = 0 if name == "base" else last_step
            marker = "*" if name == "trained" else next(markers, "o")
            ax.scatter([x], [value], marker=marker, s=80, zorder=3, label=f"rapo eval: {name}")
            drawn = True
    if drawn:
        n = (evaluation or {}).get("n")
        _style(ax, "Held-out pass@1" + (f" ({n} questions)" if n else ""), "pass@1")
        ax.set_ylim(-0.02, 1.02)
    return drawn


def evaluation_rows(evaluation: dict | None) -> dict:
    """``model name -> metrics`` of a ``rapo eval`` result (``rows``; older files call it ``results``)."""
    evaluation = evaluation or {}
    rows = evaluation.get("rows", evaluation.get("results"))
    return rows if isinstance(rows, dict) else {}


def _style(ax, title: str, ylabel: str) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def plot_history(history: list[dict], out_dir, evaluation: dict | None = None, dpi: int = 120) -> list[Path]:
    """Write the PNGs of a ``log_history`` (and an optional ``rapo eval`` result) into ``out_dir``.

    Returns the files written; a quantity that was never logged gets no file. Raises ``ValueError`` when
    nothing at all can be drawn.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    drawers = [(panel.name, lambda ax, p=panel: _draw_panel(ax, history, p)) for panel in PANELS]
    drawers.insert(1, ("pass_at_1", lambda ax: _draw_pass_at_1(ax, history, evaluation)))
    written, kept = [], []
    for name, draw in drawers:
        plt, fig, (ax,) = _figure()
        if draw(ax):
            fig.tight_layout()
            fig.savefig(out / f"{name}.png", dpi=dpi)
            written.append(out / f"{name}.png")
            kept.append(draw)
        plt.close(fig)
    if not written:
        raise ValueError("the log history holds none of the plotted metrics (reward, rapo/*, *pass@1)")
    plt, fig, axes = _figure(len(kept))
    for ax, draw in zip(axes, kept):
        draw(ax)
    fig.tight_layout()
    fig.savefig(out / "summary.png", dpi=dpi)
    plt.close(fig)
    return [*written, out / "summary.png"]


def plot_run(run, out_dir=None, dpi: int = 120) -> list[Path]:
    """Redraw a run's plots from its logged history: ``run`` is a training output folder (or a
    ``trainer_state.json``); PNGs go to ``out_dir`` (default ``<run>/plots``)."""
    history = load_log_history(run)
    folder = Path(run) if Path(run).is_dir() else Path(run).parent
    return plot_history(history, out_dir or folder / PLOTS_DIR, _evaluation_of(folder), dpi=dpi)


def _evaluation_of(folder: Path) -> dict | None:
    """``rapo eval``'s results in ``folder``, unless the run recorded there stopped before it saved its model: they
    then score the model an earlier run left in the same folder, while the history drawn is the stopped run's."""
    if not (folder / EVAL_FILE).is_file():
        return None
    if recorded_run(str(folder)).get("finished") is False:
        logger.warning("%s is left out of the plots: it scores the model an earlier run saved in %s, and the run "
                       "recorded there stopped before it saved its own", EVAL_FILE, folder)
        return None
    try:
        return json.loads((folder / EVAL_FILE).read_text())
    except json.JSONDecodeError:
        return None  # a broken eval file must not stop the training plots
