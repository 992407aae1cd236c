"""`scripts/demo.sh` (what `make demo` runs), with a stand-in `rapo`: after `rapo eval` it adds the run's
times to the eval report and replaces the committed plots with the run's fresh ones."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

DEMO_SH = Path(__file__).parent.parent / "scripts" / "demo.sh"

FAKE_RAPO = """#!/bin/sh
# Stand-in for `rapo`: train draws the plots, eval redraws them and writes the report.
case "$1" in
  train|eval) mkdir -p runs/demo/model/plots && echo "$1" > runs/demo/model/plots/summary.png ;;
esac
if [ "$1" = eval ]; then mkdir -p benchmarks/results && echo '{"rows": {}}' > benchmarks/results/demo_eval.json; fi
"""


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_demo_copies_the_fresh_plots_into_benchmarks_results(tmp_path):
    (tmp_path / "scripts").mkdir()
    shutil.copy(DEMO_SH, tmp_path / "scripts" / "demo.sh")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    _executable(bin_dir / "rapo", FAKE_RAPO)
    _executable(bin_dir / "python", f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (tmp_path / "demo.yaml").write_text(
        "output_dir: runs/demo/model\neval_report: benchmarks/results/demo_eval.json\n"
    )
    plots = tmp_path / "runs" / "demo" / "model" / "plots"
    plots.mkdir(parents=True)
    stale = plots / "from_an_older_run.png"
    stale.write_text("old")
    os.utime(stale, (1_000_000, 1_000_000))
    committed = tmp_path / "benchmarks" / "results" / "demo_plots"
    committed.mkdir(parents=True)
    (committed / "summary.png").write_text("committed")
    (committed / "retrieval_reward.png").write_text("an earlier run's plot this run does not draw")

    run = subprocess.run(["bash", "scripts/demo.sh", "demo.yaml"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert (committed / "summary.png").read_text() == "eval\n"  # the plots eval redrew, not the old ones
    assert not (committed / stale.name).exists()  # only what this run drew
    # a committed plot this run did not draw (a run that never retrieved) would show another run's figures
    assert sorted(p.name for p in committed.iterdir()) == ["summary.png"]
    report = json.loads((tmp_path / "benchmarks" / "results" / "demo_eval.json").read_text())
    assert set(report["run_seconds"]) == {"build_store", "train", "eval", "total"}
    assert "make demo: whole run" in run.stdout
