"""The pip arguments that install torch's CPU build on a machine without a GPU (used by scripts/setup.sh).

An ordinary Linux ``pip install torch`` resolves the multi-GB CUDA build. Without ``nvidia-smi`` this prints
``--extra-index-url URL`` for PyTorch's CPU wheel index (``RAPO_TORCH_INDEX``, default below) when that index
answers within a few seconds: pip then prefers ``torch==X+cpu`` from it, and takes every other package from
the indexes it is configured with. Otherwise it prints nothing and says why on stderr: pip installs torch from
its configured indexes as before (offline wheel folders, a mirror; on an ordinary Linux machine that is the
CUDA build, which runs on a CPU too).
"""

from __future__ import annotations

import os
import shutil
import sys
import urllib.request

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PROBE_TIMEOUT_S = 5.0


def reachable(url: str, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether ``url``/torch/ (the package's page of a PEP 503 index) answers."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/torch/", timeout=timeout) as response:  # noqa: S310
            return response.status == 200
    except (OSError, ValueError):
        return False


def torch_pip_args(index: str, has_gpu: bool) -> tuple[list[str], str]:
    """``(pip arguments, what happens)`` for installing torch."""
    if has_gpu:
        return [], "a GPU (nvidia-smi) is present: torch comes from pip's configured indexes (the CUDA build)"
    if not reachable(index):
        return [], (f"no GPU, and the CPU build's index {index} is not reachable: torch comes from pip's "
                    "configured indexes (on an ordinary Linux machine the CUDA build, which runs on a CPU too)")
    return ["--extra-index-url", index], f"no GPU: torch's CPU build from {index}"


def main() -> int:
    index = os.environ.get("RAPO_TORCH_INDEX", CPU_INDEX)
    args, said = torch_pip_args(index, has_gpu=shutil.which("nvidia-smi") is not None)
    print(f"setup: {said}", file=sys.stderr)
    print(" ".join(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
