"""docs/benchmarks.md's `make demo` rows are what the result files they cite say (`benchmarks/demo_rows.py` writes
them), so a new `make demo` result cannot leave the page stale."""

from __future__ import annotations

import copy
import json

from tests.helpers.benchmarks import ROOT, load_bench


def test_the_pages_demo_rows_are_the_committed_results():
    rows = load_bench("demo_rows")
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    on_page = [line for line in page.splitlines() if line.startswith(rows.ROW_START)]
    assert on_page == rows.current_rows(), "run `python benchmarks/demo_rows.py` to write them from the results"


def test_a_new_result_changes_the_rows_and_the_rewrite_puts_them_in_place():
    rows = load_bench("demo_rows")
    report = json.loads((rows.RESULTS / "demo_eval.json").read_text())
    markdown = (rows.RESULTS / "demo_eval.md").read_text()
    changed = copy.deepcopy(report)
    changed["run_seconds"]["total"] = 1234
    scored = changed["sets"][changed["split"]]["rows"]
    scored["trained"]["pass@1"], scored["trained"]["pass@1_ci95"] = 0.5, [0.4, 0.6]
    scored["grpo_same_rollouts"]["pass@1_ci95"] = [0.2, 0.39]
    scored["sft_on_store"]["pass@1"], scored["sft_on_store"]["pass@1_ci95"] = 0.25, [0.15, 0.35]
    scored["warm_start"]["pass@1"], scored["warm_start"]["pass@1_ci95"] = 0.1, [0.05, 0.2]
    new = rows.demo_rows(changed, markdown)
    assert new != rows.demo_rows(report, markdown)
    assert "1234 s (build-store" in new[1] and "trained 0.500 (0.400-0.600)" in new[0]
    assert "**Trained above warm start, SFT on the store, GRPO baseline beyond noise**" in new[0]
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    rewritten = rows.rewrite(page, new)
    assert [line for line in rewritten.splitlines() if line.startswith(rows.ROW_START)] == new
    assert len(rewritten.splitlines()) == len(page.splitlines())


def test_a_sampled_result_is_read_on_mean_at_k_and_its_intervals():
    rows = load_bench("demo_rows")
    report = json.loads((rows.RESULTS / "demo_eval.json").read_text())
    sampled = copy.deepcopy(report)
    sampled["k"] = 4
    primary = sampled["sets"][sampled["split"]]["rows"]
    for name, row in primary.items():
        row["mean@k"], row["mean@k_ci95"] = (0.9, [0.8, 0.95]) if name == "trained" else (0.1, [0.05, 0.2])
    title = f"| model (word_problems, {sampled['split']}, n=64, mean@4 at T=0.7) | pass@1 |"
    outcome = rows.demo_rows(sampled, title)[0]
    assert "(n = 64) mean@4 at T = 0.7: warm start 0.100 (0.050-0.200)" in outcome
    assert "trained 0.900 (0.800-0.950)" in outcome
    assert "**Trained above warm start, SFT on the store, GRPO baseline beyond noise**" in outcome
    assert rows.verdict(sampled) != rows.verdict(report)
