"""Checks a folder of wheels for the GPU machine (scripts/gpu/stage.sh): every wheel's own requirements, evaluated for
CPython 3.12 on x86-64 Linux with no extras, are met by a wheel in the folder or by the image's packages (the device
tool's KINDS.md list); where the image's version is known, the requirement's range must admit it.
Usage: python check_wheels.py WHEEL_DIR [NAME==VERSION ...]   (the specs: exactly one wheel each, no strays)"""

import re
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

# The image 'cuda' (KINDS.md, read 2026-11-17): its packages, and the versions a session's pip list showed.
IMAGE = """absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx humanize huggingface-hub hypothesis idna
imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe
matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals
networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13
nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy
peft pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six
sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile
tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm
transformers treescope triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel
wrapt xarray xxhash yarl zipp""".split()
KNOWN = {"accelerate": "1.15.0", "huggingface-hub": "1.33.0", "jax": "0.11.2", "numpy": "2.5.2", "onnx": "1.23.1",
         "safetensors": "0.8.0", "sentence-transformers": "6.0.1", "tokenizers": "0.23.2", "torch": "2.11.0",
         "transformers": "5.17.0", "triton": "3.6.0", "sentencepiece": "0.2.2", "tiktoken": "0.14.0"}
# Left out on purpose (scripts/gpu/stage.sh says why): chromadb's distributed mode, ipykernel's debugger, IPython's completer.
OMITTED = {"kubernetes", "debugpy", "jedi"}
ENV = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux", "platform_system": "Linux",
       "platform_machine": "x86_64", "implementation_name": "cpython", "platform_python_implementation": "CPython",
       "os_name": "posix", "extra": ""}


def main(folder: str, *specs: str) -> int:
    wheels = {}
    for path in sorted(Path(folder).glob("*.whl")):
        name, version, *_ = parse_wheel_filename(path.name)
        if name in wheels:
            print(f"two versions of {name}: {wheels[name][0]} and {version}")
            return 1
        wheels[name] = (version, path)
    problems = []
    for spec in specs:
        name, version = spec.split("==")
        got = wheels.get(canonicalize_name(name))
        if got is None or got[0] != Version(version):
            problems.append(f"{spec}: no such wheel in {folder}")
    if specs and len(wheels) != len(specs):
        problems.append(f"{len(wheels)} wheels for {len(specs)} specs: strays in {folder}")
    image = {canonicalize_name(n) for n in IMAGE}
    for name, (version, path) in wheels.items():
        with zipfile.ZipFile(path) as archive:
            meta = next(n for n in archive.namelist() if re.match(r"[^/]+\.dist-info/METADATA$", n))
            message = Parser().parsestr(archive.read(meta).decode())
        for line in message.get_all("Requires-Dist") or []:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate(ENV):
                continue
            dep = canonicalize_name(req.name)
            if dep in wheels:
                if not req.specifier.contains(wheels[dep][0], prereleases=True):
                    problems.append(f"{name} {version} needs {req}; the set has {dep} {wheels[dep][0]}")
            elif dep in KNOWN:
                if not req.specifier.contains(KNOWN[dep], prereleases=True):
                    problems.append(f"{name} {version} needs {req}; the image has {dep} {KNOWN[dep]}")
            elif dep in OMITTED:
                print(f"wheel check: {name} {version} needs {req}: left out on purpose")
            elif dep not in image:
                problems.append(f"{name} {version} needs {req}: neither in the set nor on the image")
    for line in problems:
        print("wheel check:", line)
    print(f"wheel check: {len(wheels)} wheels, {sum(p.stat().st_size for _, p in wheels.values())} bytes, "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
