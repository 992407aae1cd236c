#!/usr/bin/env bash
# The GPU check (issue 34) in four calls of the device tool, back to back (what a call leaves under /tmp survives only
# while the machine stays warm: 30 s). Each call's command is `bash scripts/gpu/step.sh STEP`; scripts/gpu/stage.sh
# fills the ignored bundles it carries:
#   a  carry .gpu/a  wheels -> /tmp/site, versions, nvidia-smi; the gpu-marked tests; CUDA-relevant test files with
#                    the GPU visible (trainer, rollout, hardware rule)                                       (~5 min)
#   b  carry .gpu/b  MiniLM lands (fp32); embedder / store / device tests with the GPU visible; the notebook test under
#                    a real kernel on the CPU (tiny model)                                                   (~3 min)
#   c  carry .gpu/c  GGUF joined + sha256 + SmolLM2 converted; engine vs generate on CUDA (bf16); the demo store; the
#                    step split on CUDA at G = 8 and G = 16 (RAPO and GRPO on the same rows)                 (~7 min)
#   d  no carry      the quickstart notebook on the GPU (SmolLM2); the learning benchmark on CUDA, two seeds side by
#                    side, each run capped in training time                                                  (~8 min)
#   learn no carry   (after a, b and `c land`, which may share its call) the learning comparison's GPU recipe:
#                    benchmarks/bench_comparison_gpu.py, GRPO and RAPO side by side to a deadline, then scored (~9 min)
# Each step writes under $OUT: step_STEP.log, results_STEP.tar (all it made) and its main tables, flat (<= 8 files).
# Without CUDA it says so and goes on (gpu tests skip). A dry run here, every phase cut to 20 s, no wheels installed:
#   GPU_DRY=1 PY=.venv/bin/python OUT=/tmp/dry/out GPU_SITE=/tmp/dry/site GPU_STASH=/tmp/dry/stash bash scripts/gpu/step.sh a
set -uo pipefail
cd "$(dirname "$0")/../.."
STEP=${1:?usage: step.sh a|b|c|d [lite]}
LITE=${2:-}  # lite: the payload lands and only step c's step split and step d's notebook and decode profile run;
             # land (step c): the payload lands and nothing else
OUT=${OUT:-/tmp/gpu-out}
SITE=${GPU_SITE:-/tmp/site} STASH=${GPU_STASH:-/tmp/gpu-stash} WORK=/tmp/gpu-work/$STEP
mkdir -p "$OUT" "$SITE" "$STASH" "$WORK"
export PYTHONPATH=$SITE:$PWD/src:$PWD HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export TOKENIZERS_PARALLELISM=false ANONYMIZED_TELEMETRY=False PYTHONUNBUFFERED=1 MPLBACKEND=Agg WANDB_DISABLED=true
export RAPO_CACHE=${RAPO_CACHE:-/tmp/rapo_cache} JUPYTER_PLATFORM_DIRS=1
PY=${PY:-python3}
exec > >(tee -a "$OUT/step_$STEP.log") 2>&1
say() { echo "[gpu $STEP $(date +%T)] $*"; }
timed() {  # timed SECONDS NAME CMD...: runs CMD under a limit, reports its exit code and time, returns it
  local limit=$1 name=$2 start rc; shift 2
  [ -n "${GPU_DRY:-}" ] && limit=20
  start=$(date +%s); say "start $name (limit ${limit}s)"
  timeout --kill-after=15 "$limit" "$@"; rc=$?
  say "end $name: rc=$rc$( [ $rc -eq 124 ] && echo ' (TIMED OUT)') in $(( $(date +%s) - start )) s"
  echo "$name: rc=$rc $(( $(date +%s) - start ))s" >> "$WORK/summary.txt"
  return $rc
}
finish() {  # the results tar and the step's main files, flat under $OUT
  cp "$WORK/summary.txt" "$OUT/summary_$STEP.txt" 2>/dev/null
  tar -C "$WORK" -cf "$OUT/results_$STEP.tar" . && say "results_$STEP.tar: $(du -h "$OUT/results_$STEP.tar" | cut -f1)"
  for f in "$@"; do [ -f "$WORK/$f" ] && cp "$WORK/$f" "$OUT/"; done
  say "step $STEP done in $SECONDS s"; cat "$WORK/summary.txt" 2>/dev/null
}
need() {  # need FILE WHAT: a file an earlier step left under /tmp
  [ -e "$1" ] || { say "missing $1 ($2): the machine went cold or step order was broken; run the steps again from a"
                   exit 3; }
}
PYTEST=($PY -m pytest -p no:cacheprovider -o addopts= --strict-markers -rA --timeout 240)
XDIST=(); $PY -c "import xdist" 2>/dev/null && XDIST=(-n 8)
CUDA=$($PY -c "import torch; print(int(torch.cuda.is_available()))" 2>/dev/null || echo 0)
[ "$CUDA" = 1 ] || say "NO CUDA DEVICE HERE: gpu tests will skip and the benchmarks run their CPU fallbacks or fail"
DEV=$([ "$CUDA" = 1 ] && echo cuda || echo cpu) DTYPE=$([ "$CUDA" = 1 ] && echo bf16 || echo fp32)
: > "$WORK/summary.txt"

case $STEP in
a)
  [ -d .gpu/a/wheels ] || { say "no .gpu/a: name .gpu/a in carry (and run scripts/gpu/stage.sh here first)"; exit 2; }
  wheels=(.gpu/a/wheels/*.whl)
  arrow=$($PY -c "import pyarrow; print(pyarrow.__version__.split('.')[0])" 2>/dev/null || echo 0)
  if [ "$arrow" -lt 24 ]; then  # datasets 5.2 needs pyarrow >= 24; 4.8.5 (trl 1.16 needs >= 4.7) runs on >= 21
    say "pyarrow $arrow < 24: datasets 4.8.5 instead of 5.2.0"
    wheels=($(ls .gpu/a/wheels/*.whl | grep -v '/datasets-') .gpu/a/wheels/alt/datasets-*.whl)
  fi
  [ -n "${GPU_DRY:-}" ] && wheels=()  # a dry run uses the local venv's packages
  [ ${#wheels[@]} -eq 0 ] || timed 120 "install ${#wheels[@]} wheels" $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target "$SITE" "${wheels[@]}"
  cp .gpu/a/gguf.[0-9] "$STASH/" && touch "$SITE/.step-a"
  { nvidia-smi; $PY - <<'PY'
import importlib.metadata as m, platform, torch
print("python", platform.python_version(), "| torch", torch.__version__, "| cuda", torch.version.cuda)
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("device", p.name, f"{p.total_memory / 2**30:.1f} GiB", "| bf16 native",
          torch.cuda.is_bf16_supported(including_emulation=False))
for name in ("transformers", "trl", "peft", "accelerate", "datasets", "chromadb", "sentence-transformers",
             "huggingface-hub", "tokenizers", "pyarrow", "numpy", "safetensors", "math-verify", "gguf", "pytest",
             "pytest-timeout", "pytest-xdist", "hypothesis", "nbclient", "ipykernel", "matplotlib", "pandas"):
    try: print(f"  {name} {m.version(name)}")
    except m.PackageNotFoundError: print(f"  {name} MISSING")
import chromadb, datasets, math_verify, trl  # noqa: F401  the heavy imports load
from rapo_trl import RAPOTrainer, default_device, default_precision  # noqa: F401
print("hardware rule:", default_device(), default_precision())
PY
  } > "$WORK/env.txt" 2>&1; cat "$WORK/env.txt"
  if [ -n "$LITE" ]; then finish env.txt; exit 0; fi
  timed 150 "gpu-marked tests" "${PYTEST[@]}" -m gpu --junitxml="$WORK/junit_gpu_a.xml" tests
  # The suite's device-sensitive files with the GPU visible (the rule then picks CUDA where a test does not pin it).
  timed 180 "CUDA-visible suite: trainer, rollout, hardware" "${PYTEST[@]}" "${XDIST[@]}" -m "not vllm and not server" \
    --junitxml="$WORK/junit_cuda_a.xml" tests/trainer tests/rollout tests/test_hardware.py tests/core \
    tests/test_padding.py tests/test_evaluation.py tests/test_grpo_baseline.py tests/test_internals.py
  finish env.txt ;;
b)
  need "$SITE/.step-a" "step a's wheels"
  [ -d .gpu/b/minilm ] || { say "no .gpu/b: name .gpu/b in carry"; exit 2; }
  cp .gpu/b/gguf.[0-9] "$STASH/"
  timed 90 "MiniLM lands" $PY scripts/gpu/land_payload.py minilm "$SITE" .gpu/b && touch "$SITE/.step-b"
  if [ -n "$LITE" ]; then finish; exit 0; fi
  timed 90 "gpu-marked tests (embedder)" "${PYTEST[@]}" -m gpu --junitxml="$WORK/junit_gpu_b.xml" \
    tests/trainer/test_cuda.py tests/test_embeddings_device.py
  timed 150 "CUDA-visible suite: store, embeddings, CLI device" "${PYTEST[@]}" "${XDIST[@]}" -m "not vllm and not server" \
    --junitxml="$WORK/junit_cuda_b.xml" tests/store tests/test_embeddings_device.py tests/test_embeddings_source.py \
    tests/cli/test_device.py tests/rollout/test_agent_device.py tests/cli/test_model_loading.py
  # the quickstart under a real Jupyter kernel from the carried wheels, as CI runs it (tiny model, CPU)
  timed 120 "notebook test under a kernel (CPU)" env CUDA_VISIBLE_DEVICES= "${PYTEST[@]}" \
    --junitxml="$WORK/junit_notebook_b.xml" tests/test_notebook.py
  finish ;;
c)
  need "$SITE/.step-b" "step b's MiniLM"
  [ -d .gpu/c/smollm2 ] || { say "no .gpu/c: name .gpu/c in carry"; exit 2; }
  timed 120 "SmolLM2: join, sha256, convert" $PY scripts/gpu/land_payload.py smollm2 "$SITE" .gpu/c "$STASH" \
    || { say "SmolLM2 did not land: nothing of step c can run"; finish; exit 4; }
  touch "$SITE/.step-c"
  if [ "$LITE" = land ]; then finish; exit 0; fi  # only the landing: `step.sh learn` follows in the same call
  [ -n "$LITE" ] || timed 150 "engine vs generate ($DEV, $DTYPE)" $PY benchmarks/bench_engine_vs_generate.py \
    --device "$DEV" --dtype "$DTYPE" --rows 8 16 64 --generations 8 \
    --repeats 2 --warmup --threads 8 --out "$WORK/rollout_gpu.md"
  timed 60 "demo store (build-store)" $PY -m rapo_trl.cli build-store --config configs/demo_cpu.yaml
  for g in 8 16; do
    timed $([ -n "$LITE" ] && echo 170 || echo 100) "step split G=$g ($DEV)" $PY benchmarks/bench_step.py \
      --recipe configs/demo_cpu.yaml --steps $([ -n "$LITE" ] && echo 3 || echo 4) \
      --arms rapo grpo --results "$WORK/step_gpu_g$g" --set "use_cpu=$([ "$DEV" = cuda ] && echo false || echo true)" \
      "bf16=$([ "$DEV" = cuda ] && echo true || echo false)" num_generations=$g num_hybrid_generations=$((g / 2)) \
      per_device_train_batch_size=$g gradient_accumulation_steps=1
  done
  finish rollout_gpu.md step_gpu_g8.md step_gpu_g16.md ;;
d)
  need "$SITE/.step-c" "step c's SmolLM2"
  if [ -n "$LITE" ]; then
    timed 200 "quickstart notebook ($DEV, 3 steps, 8 eval questions)" env RAPO_NOTEBOOK_STEPS=3 RAPO_NOTEBOOK_EVAL=8 \
      $PY scripts/gpu/run_notebook.py notebooks/quickstart.ipynb "$WORK/notebook_gpu"
    timed 120 "decode profile" $PY scripts/gpu/decode_profile.py > "$WORK/decode_profile.txt" 2>&1
    cat "$WORK/decode_profile.txt"
    finish notebook_gpu.txt decode_profile.txt; exit 0
  fi
  timed 200 "quickstart notebook ($DEV)" $PY scripts/gpu/run_notebook.py notebooks/quickstart.ipynb \
    "$WORK/notebook_gpu"
  # Two seeds side by side on the one GPU (bench_learning's file lock shares the store, start and results); each run
  # trains for at most --max-train-seconds, then evaluates and records the steps it did.
  learn=(--device "$DEV" --starts stories --arms grpo rapo --steps 40 --num-generations 16 --prompts-per-step 2
         --micro-batch 16 --eval-every 10 --stories-eval-size 64 --samples 4 --max-train-seconds 60 --threads 4
         --workdir /tmp/learn --results "$WORK/learning")
  timed 300 "learning benchmark, seed 0" $PY benchmarks/bench_learning.py "${learn[@]}" --seeds 0 > "$WORK/learn_0.log" 2>&1 &
  sleep 20  # seed 0 takes the setup lock first (store, warm start, initial evaluation); seed 1 reuses them
  timed 280 "learning benchmark, seed 1" $PY benchmarks/bench_learning.py "${learn[@]}" --seeds 1 > "$WORK/learn_1.log" 2>&1 &
  wait
  tail -n 30 "$WORK"/learn_*.log
  [ -f "$WORK/learning/learning.json" ] || say "no learning.json: no run finished inside the cap"
  finish notebook_gpu.txt learning/learning.md ;;
learn)  # after a, b and c (c land may share this call): the learning comparison's GPU recipe, its arms side by side
  need "$SITE/.step-c" "step c's SmolLM2"
  # a store built on the CPU for the same recipe (stage.sh STORE=...) saves its build here
  if [ -f .gpu/c/store.tar.xz ] && [ ! -d /tmp/gpu-learn/store ]; then
    mkdir -p /tmp/gpu-learn && xz -dc .gpu/c/store.tar.xz | tar -xf - -C /tmp/gpu-learn && say "store landed: $(ls /tmp/gpu-learn)"
  fi
  # three processes share 16 cores (two trainings, one eval); the host only launches kernels and runs tools
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
  timed ${LEARN_LIMIT:-540} "learning comparison on $DEV (deadline ${DEADLINE:-420}s)" $PY benchmarks/bench_comparison_gpu.py \
    --workdir /tmp/gpu-learn --deadline "${DEADLINE:-420}" --records "$WORK/gpu_records.json" ${LEARN_ARGS:-}
  # the runs' logs and states travel in the results tar; models, checkpoints and the store stay behind
  (cd /tmp/gpu-learn && find . -maxdepth 3 \( -name '*.log' -o -name trainer_state.json -o -name eval_results.json \
    -o -name sft_history.json \) -print0 | tar --null -T - -cf "$WORK/runs.tar")
  cp benchmarks/results/learning_comparison.md "$WORK/" 2>/dev/null
  tail -n 5 /tmp/gpu-learn/*.log
  finish gpu_records.json learning_comparison.md ;;
probe)  # no carry, no payload: SDPA backends while decoding (scripts/gpu/attention_probe.py)
  timed 200 "attention probe" $PY scripts/gpu/attention_probe.py ;;
*) echo "unknown step $STEP (a, b, c, d, learn or probe)" >&2; exit 2 ;;
esac
