#!/usr/bin/env bash
# The single-GPU recipe (configs/qwen_gpu.yaml, or the recipe given) end to end: download its model from the Hub,
# fill its trace store (`rapo build-store`), train, evaluate. NPROC=N trains on N GPUs with `accelerate launch`
# (one process per GPU; only the main process saves the warm start and the model). RAPO_DRY_RUN=1 prints the
# commands instead of running them. Not run on a GPU yet.
# Every command runs with the venv's interpreter (`make setup` makes .venv; RAPO_VENV or PYTHON name another), so
# no venv needs activating. Precision follows the device, as in the notebook: bf16 where the GPU computes it
# natively, fp16 otherwise (T4, V100): the recipe sets neither, and RAPOConfig chooses (rapo_trl.hardware).
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=${1:-configs/qwen_gpu.yaml}
NPROC=${NPROC:-1}
PY=${PYTHON:-${RAPO_VENV:-.venv}/bin/python}
if [ -z "${RAPO_DRY_RUN:-}" ] && [ ! -x "$PY" ]; then
  echo "gpu_recipe.sh: no Python at $PY; run 'make setup' first (or set PYTHON to the venv's python)" >&2
  exit 1
fi
run() {
  if [ -n "${RAPO_DRY_RUN:-}" ]; then echo "$*"; else "$@"; fi
}
export HF_HUB_OFFLINE=0  # this recipe loads its model by hub id
model=$("$PY" -c "import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))['model_name_or_path'])" "$CONFIG")
run "$PY" -c "from huggingface_hub import snapshot_download; snapshot_download('$model')"
run "$PY" -m rapo_trl.cli build-store --config "$CONFIG"
if [ "$NPROC" -gt 1 ]; then
  run "$PY" -m accelerate.commands.launch --num_processes "$NPROC" -m rapo_trl.cli train --config "$CONFIG"
else
  run "$PY" -m rapo_trl.cli train --config "$CONFIG"
fi
run "$PY" -m rapo_trl.cli eval --config "$CONFIG"
