"""A short sandbox soak (bench_chaos.py's, 50 calls): every kind of program, nothing leaked, no call late."""

from __future__ import annotations

import sys

import pytest

from tests.helpers.benchmarks import load_bench

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sandbox layers are Linux-only")


def test_fifty_calls_of_the_mix_leak_nothing_and_keep_their_timeout():
    result = load_bench("bench_chaos").soak(50, timeout=2.0)
    assert result["leaked"] == {"processes": 0, "fds": 0, "temp_entries": 0, "cgroups": 0}, result
    assert result["unexpected_count"] == 0, result["unexpected_outcomes"]
    assert result["max_seconds_past_timeout"] <= 1.0
    normal = result["per_kind"]["normal"]
    assert result["per_kind"]["slow"]["ok"] == 0 and normal["ok"] == normal["calls"] == 25
