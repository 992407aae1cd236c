#!/usr/bin/env bash
# The single-GPU recipe (configs/qwen_gpu.yaml, or the recipe given) end to end: download its model from the Hub,
# fill its trace store (`rapo build-store`), train, evaluate. NPROC=N trains on N GPUs with `accelerate launch`
# (one process per GPU; only the main process saves the warm start and the model). RAPO_DRY_RUN=1 prints the
# commands instead of running them. Not run on a GPU yet.
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=${1:-configs/qwen_gpu.yaml}
NPROC=${NPROC:-1}
PY=${PYTHON:-python}
run() {
  if [ -n "${RAPO_DRY_RUN:-}" ]; then echo "$*"; else "$@"; fi
}
export HF_HUB_OFFLINE=0  # this recipe loads its model by hub id
model=$("$PY" -c "import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))['model_name_or_path'])" "$CONFIG")
run "$PY" -c "from huggingface_hub import snapshot_download; snapshot_download('$model')"
run rapo build-store --config "$CONFIG"
if [ "$NPROC" -gt 1 ]; then
  run accelerate launch --num_processes "$NPROC" -m rapo_trl.cli train --config "$CONFIG"
else
  run rapo train --config "$CONFIG"
fi
run rapo eval --config "$CONFIG"
