#!/usr/bin/env bash
# `make demo`: build the trace store, train (SFT warm start -> RAPO -> equal-time SFT baseline), evaluate on
# held-out templates. The last line counts the whole time; it is also written into the eval report.
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-configs/demo_cpu.yaml}
rapo=.venv/bin/rapo
t0=$(date +%s)
$rapo build-store --config "$config"
t1=$(date +%s)
$rapo train --config "$config"
t2=$(date +%s)
$rapo eval --config "$config"
t3=$(date +%s)
.venv/bin/python - "$config" "$t0" "$((t1 - t0))" "$((t2 - t1))" "$((t3 - t2))" <<'PY'
import json, shutil, sys
from pathlib import Path
import yaml
config, t0, build, train, evaluate = sys.argv[1], *map(int, sys.argv[2:])
recipe = yaml.safe_load(Path(config).read_text())
report = recipe.get("eval_report")
if report and Path(report).is_file():
    payload = json.loads(Path(report).read_text())
    payload["run_seconds"] = {"build_store": build, "train": train, "eval": evaluate, "total": build + train + evaluate}
    Path(report).write_text(json.dumps(payload, indent=2))
# The committed pictures follow a re-run: this run's plots (drawn by train, redrawn by eval) replace them, and a
# committed plot this run did not draw goes (it would show another run's figures beside this one's).
plots = Path(recipe.get("output_dir") or "runs/demo/model") / "plots"
fresh = [png for png in sorted(plots.glob("*.png")) if png.stat().st_mtime >= t0]
if fresh:
    target = Path("benchmarks/results/demo_plots")
    target.mkdir(parents=True, exist_ok=True)
    for old in target.glob("*.png"):
        old.unlink()
    for png in fresh:
        shutil.copy2(png, target / png.name)
    print(f"Copied {len(fresh)} plots from {plots} to {target}/")
PY
echo "make demo: whole run $((t3 - t0)) s (build-store $((t1 - t0)) s, train $((t2 - t1)) s, eval $((t3 - t2)) s)"
