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
    trained = changed["sets"][changed["split"]]["rows"]["trained"]
    trained["mean@k"], trained["mean@k_ci95"] = 0.5, [0.4, 0.6]
    new = rows.demo_rows(changed, markdown)
    assert new != rows.demo_rows(report, markdown)
    assert "1234 s (build-store" in new[1] and "trained 0.500 (0.400-0.600)" in new[0]
    assert "**Trained above warm start, equal-time SFT, GRPO baseline beyond noise**" in new[0]
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    rewritten = rows.rewrite(page, new)
    assert [line for line in rewritten.splitlines() if line.startswith(rows.ROW_START)] == new
    assert len(rewritten.splitlines()) == len(page.splitlines())


def test_a_greedy_only_result_is_read_on_pass_at_1_and_its_intervals():
    rows = load_bench("demo_rows")
    report = json.loads((rows.RESULTS / "demo_eval.json").read_text())
    greedy = copy.deepcopy(report)
    greedy["k"] = 0
    for result in greedy["sets"].values():
        for row in result["rows"].values():
            for key in ("mean@k", "mean@k_ci95", "k"):
                row.pop(key, None)
    primary = greedy["sets"][greedy["split"]]["rows"]
    primary["trained"]["pass@1"], primary["trained"]["pass@1_ci95"] = 0.9, [0.8, 0.95]
    outcome = rows.demo_rows(greedy, "")[0]
    assert "(n = 64) greedy pass@1: warm start " in outcome and "trained 0.900 (0.800-0.950)" in outcome
    assert "**Trained above warm start, equal-time SFT, GRPO baseline beyond noise**" in outcome
