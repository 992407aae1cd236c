"""What every benchmark script shares: offline settings, the machine a result was measured on, a JSON result
store several processes may append to, and the pieces of the markdown reports.

Imported as ``common`` (each script puts its own folder first on ``sys.path``, so it also works when a test
loads a script by path). Nothing here imports torch or the package at import time: the scripts set the
environment first.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from importlib import metadata
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
REPO = RESULTS.parent.parent

OFFLINE_ENVIRONMENT = {
    "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false", "ANONYMIZED_TELEMETRY": "False", "TRL_EXPERIMENTAL_SILENCE": "1",
}
"""Nothing a benchmark loads comes from a hub; set before torch, transformers or chromadb are imported (child
processes inherit it). A value already in the environment wins."""


def use_offline_environment() -> None:
    for key, value in OFFLINE_ENVIRONMENT.items():
        os.environ.setdefault(key, value)


# ------------------------------------------------------------------ the machine


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def native_bf16() -> bool:
    """Whether the CPU computes bf16 natively (else torch emulates it, slower than fp32)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def machine_info(*packages: str) -> dict:
    """Where and with what a result was measured: date, CPU, load, GPU, Python, and the versions of torch,
    transformers, trl and ``packages``. One record format for every benchmark, so results compare."""
    import torch

    versions = {name: _version(name) for name in ("torch", "transformers", "trl", *packages)}
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "native_bf16": native_bf16(),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "python": platform.python_version(),
        **versions,
    }


def machine_line(machine: dict) -> str:
    """One sentence naming a :func:`machine_info` record (or an older record of one benchmark's own format)."""
    cpu = machine.get("cpu") or machine.get("platform", "unknown machine")
    if "cpus" in machine and "cores" not in cpu:
        cpu += f", {machine['cpus']} cores" + (f" (torch threads: {machine['torch_threads']})"
                                               if "torch_threads" in machine else "")
    if "native_bf16" in machine:
        # two machines of one CPU name can differ here, and it decides the precision every run trained in
        cpu += ", bf16 instructions" if machine["native_bf16"] else ", no bf16 instructions"
    gpu = f", {machine['gpu']}" if machine.get("gpu") else ""
    versions = ", ".join(f"{name} {machine[name]}" for name in ("torch", "transformers", "trl") if name in machine)
    return f"{cpu}{gpu}; Python {machine.get('python', '?')}, {versions}"


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def command_line() -> str:
    """How this process was started, for a report's provenance."""
    return " ".join([Path(sys.executable).name, *sys.argv])


# ------------------------------------------------------------------ the result store


def rapo_command(*arguments: str) -> list[str]:
    """The ``rapo`` command of this Python's environment: its entry point, or ``python -m rapo_trl.cli`` where the
    package is on ``PYTHONPATH`` without being installed (the GPU machine's wheels under ``--target``)."""
    script = Path(sys.executable).parent / "rapo"
    return [str(script), *arguments] if script.exists() else [sys.executable, "-m", "rapo_trl.cli", *arguments]


def run_rapo(*arguments: str) -> None:
    """The ``rapo`` command of this Python's environment, from the repository's root: what a user runs."""
    command = rapo_command(*arguments)
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True, cwd=Path(__file__).resolve().parent.parent)


def store_built_once(workdir: Path, recipe: str) -> Path:
    """``workdir/store``: the recipe's store (RL's own questions, the warm start's collection beside it), built by
    ``rapo build-store`` when it is not there yet."""
    store = workdir / "store"
    if not store.exists():
        run_rapo("build-store", "--config", recipe, "--store_path", str(store))
    return store


def train_from_shared_warm_start(output: Path, shared_warm_start: Path, *arguments: str,
                                 resume: bool = False) -> tuple[float, int]:
    """``rapo train --output_dir output *arguments`` into a fresh ``output``, starting from ``shared_warm_start`` when
    it exists (its cache key matches, so train reuses it instead of training it again) and keeping this run's warm
    start there when it does not; the warm start is then removed from ``output``, so eval scores the trained model
    alone. With ``resume``, an ``output`` that holds a whole checkpoint (a run killed part way, its arguments saving
    checkpoints) is kept and goes on from its newest one, which the resume makes exact. Returns the training's wall
    seconds (of this sitting alone) and the step it resumed from (0 for a fresh run)."""
    import shutil
    import time

    checkpoint = newest_whole_checkpoint(output) if resume else None
    if checkpoint is None:
        if output.exists():
            shutil.rmtree(output)
        output.mkdir(parents=True)
    warm_start = output / shared_warm_start.name
    if shared_warm_start.exists() and not warm_start.exists():
        shutil.copytree(shared_warm_start, warm_start)
    resuming = ["--resume_from_checkpoint", str(checkpoint)] if checkpoint is not None else []
    started = time.perf_counter()
    run_rapo("train", "--output_dir", str(output), *arguments, *resuming)
    seconds = time.perf_counter() - started
    if not shared_warm_start.exists():
        shutil.copytree(warm_start, shared_warm_start)
    shutil.rmtree(warm_start)
    return seconds, 0 if checkpoint is None else int(checkpoint.name.removeprefix("checkpoint-"))


def newest_whole_checkpoint(output: Path) -> Path | None:
    """``output``'s newest ``checkpoint-N`` whose ``trainer_state.json`` reads (a save killed part way has none).
    The package's ``last_complete_checkpoint`` applies the same test, but a benchmark runs against a worktree's
    ``src`` fixed at an older commit, where that function lives in another module: the bench keeps its own."""
    folders = sorted((int(path.name.removeprefix("checkpoint-")), path) for path in output.glob("checkpoint-*")
                     if path.name.removeprefix("checkpoint-").isdigit())
    for _, folder in reversed(folders):
        try:
            json.loads((folder / "trainer_state.json").read_text())
        except (OSError, ValueError):
            continue
        return folder
    return None


@contextlib.contextmanager
def locked(path: Path):
    """An exclusive lock on ``path`` (a sidecar file), so parallel processes set up and append one at a time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(str(path) + ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def update_results(path: Path, change: Callable[[dict], None], empty: Callable[[], dict] = dict) -> dict:
    """Read the JSON results at ``path`` (``empty()`` when there are none), apply ``change`` in place and write
    them back, all under the lock: processes running seeds or settings side by side each add their own."""
    with locked(path):
        data = json.loads(path.read_text()) if path.exists() else empty()
        change(data)
        path.write_text(json.dumps(data, indent=1) + "\n")
    return data


# ------------------------------------------------------------------ reports


def markdown_table(head: Sequence[str], rows: Iterable[Sequence], align: str | None = None) -> list[str]:
    """A markdown table's lines; ``align`` gives each column ``l`` or ``r`` (default: all left)."""
    align = align or "l" * len(head)
    if len(align) != len(head):
        raise ValueError(f"{len(head)} columns but alignment {align!r}")
    lines = ["| " + " | ".join(head) + " |", "|" + "".join("---:|" if a == "r" else "---|" for a in align)]
    for row in rows:
        if len(row) != len(head):
            raise ValueError(f"a row of {len(row)} cells for {len(head)} columns: {row!r}")
        lines.append("| " + " | ".join(str(cell) for cell in row) + " |")
    return lines


STUDENT_T_95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
"""Two-sided 95% quantiles of Student's t by degrees of freedom: intervals of a mean over a handful of seeds."""


def mean_interval(values: Sequence[float]) -> tuple[float, float | None, float | None]:
    """(mean, low, high): the 95% interval of the mean of a handful of values (seeds), Student's t; no interval for
    one value."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None, None
    half = STUDENT_T_95.get(len(values) - 1, 1.96) * statistics.stdev(values) / len(values) ** 0.5
    return mean, mean - half, mean + half


def with_notes(text: str, notes: Path) -> str:
    """``text`` followed by a hand-written reading of the figures kept beside it (``notes``), when there is one:
    the notes survive every redraw of the report."""
    return text.rstrip("\n") + "\n\n" + notes.read_text().rstrip() + "\n" if notes.is_file() else text


def splice_block(text: str, block: str, name: str) -> str:
    """``text`` with its block ``name`` (between ``<!-- name -->`` and ``<!-- /name -->``) replaced by ``block``,
    or ``block`` put first when it has none: two benchmarks write one report without erasing each other's
    part or the notes around them."""
    begin, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    block = f"{begin}\n{block.strip()}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        return head + block + rest.split(end, 1)[1]
    return block + "\n\n" + text if text else block + "\n"


def shown_path(path: str | Path) -> str:
    """``path`` relative to the repository when inside it, with ``~`` for the home folder otherwise: results read
    the same on every clone."""
    path = Path(path).resolve()
    if path.is_relative_to(REPO):
        return str(path.relative_to(REPO))
    home = Path.home().resolve()
    return str(Path("~") / path.relative_to(home)) if path.is_relative_to(home) else str(path)


def print_report(lines: Sequence[str], out: Path) -> None:
    """Print a markdown report and write it to ``out`` (``-``: print only)."""
    print("\n".join(lines))
    if str(out) != "-":
        out.write_text("\n".join(lines))
        print(f"wrote {out}")
