"""The fast path's ranges (rapo_trl/ranges.py) are RAPOConfig's own: each bound's nearest value outside it
is refused by RAPOConfig too, and the nearest value inside it is accepted."""

from __future__ import annotations

import pytest

from rapo_trl.ranges import ABOVE_LOWEST, RAPO_RANGES, out_of_range

STEP = {float: 0.5, int: 1}


def _config(**values):
    from rapo_trl.config import RAPOConfig

    base = dict(output_dir="unused", use_cpu=True, report_to="none", num_generations=4,
                per_device_train_batch_size=4)
    return RAPOConfig(**{**base, **values})


@pytest.mark.parametrize("name", list(RAPO_RANGES))
def test_each_bound_is_rapoconfigs(name):
    low, high, _ = RAPO_RANGES[name]
    kind = float if isinstance(low, float) or isinstance(high, float) else int
    for bound, outside in ((low, -1), (high, 1)):
        if bound is None:
            continue
        value = kind(bound + outside * STEP[kind])
        extra = {"num_generations": 8, "per_device_train_batch_size": 8} if name == "num_generations" else {}
        assert out_of_range({name: value}) is not None
        with pytest.raises(ValueError, match=name):
            _config(**{**extra, name: value})
        if name in ABOVE_LOWEST and bound == low:
            assert out_of_range({name: kind(bound)}) is not None
            with pytest.raises(ValueError, match=name):
                _config(**{**extra, name: kind(bound)})
        elif name != "num_generations" or bound != low:  # a bound itself is allowed
            assert out_of_range({name: kind(bound)}) is None


def test_hybrid_rollouts_cannot_outnumber_the_group():
    assert "num_hybrid_generations (5)" in out_of_range({"num_generations": 4, "num_hybrid_generations": 5})
    assert out_of_range({"num_generations": 4, "num_hybrid_generations": 4}) is None


def test_a_temperature_of_zero_is_refused_by_name_and_why():
    refused = out_of_range({"temperature": 0})
    assert refused.startswith("temperature must be > 0.0") and "every row of a group is the same" in refused
    assert out_of_range({"temperature": 0.01}) is None


@pytest.mark.parametrize("name", ["retrieve_prob", "temperature", "retrieval_advantage_weight", "learning_rate"])
def test_nan_is_refused_rather_than_passing_every_bound(name):
    """NaN compares false with both bounds; `--retrieve_prob nan` passed and turned retrieval off without a word."""
    assert out_of_range({name: float("nan")}) == f"{name} must be a number, got nan"
