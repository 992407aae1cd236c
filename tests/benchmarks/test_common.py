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


def test_the_machine_line_says_whether_the_cpu_computes_bf16():
    common = load_bench("common")
    machine = {"cpu": "AMD EPYC", "cpus": 2, "torch_threads": 1, "python": "3.11", "torch": "2.13"}
    assert "bf16" not in common.machine_line(machine)  # an older record without the flag says nothing of it
    assert "AMD EPYC, 2 cores (torch threads: 1), bf16 instructions;" in common.machine_line({**machine, "native_bf16": True})
    assert "AMD EPYC, 2 cores (torch threads: 1), no bf16 instructions;" in common.machine_line({**machine, "native_bf16": False})
