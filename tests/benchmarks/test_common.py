"""The benchmarks' shared result store: appends under a lock, so processes running arms side by side each add theirs."""

from __future__ import annotations

import json

from tests.helpers.benchmarks import load_bench


def test_update_results_appends_under_the_lock(tmp_path):
    common = load_bench("common")
    path = tmp_path / "results.json"
    common.update_results(path, lambda records: records.append({"arm": "a"}), empty=list)
    common.update_results(path, lambda records: records.append({"arm": "b"}), empty=list)
    assert json.loads(path.read_text()) == [{"arm": "a"}, {"arm": "b"}]
    with common.locked(path):  # a context manager: what update_results holds while it reads and writes
        assert (tmp_path / "results.json.lock").exists()
