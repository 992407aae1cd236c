"""RAPOConfig: RAPO's defaults and clear validation errors."""

import pytest

from rapo_trl.config import RAPOConfig


def make(**kwargs):
    return RAPOConfig(output_dir="unused", use_cpu=True, report_to="none", **kwargs)


def test_rapo_defaults():
    cfg = make(num_generations=16, per_device_train_batch_size=16)
    assert (cfg.loss_type, cfg.epsilon, cfg.epsilon_high, cfg.delta, cfg.beta) == ("dapo", 0.2, 0.28, 3.0, 0.0)
    assert cfg.num_hybrid_generations == 8 and cfg.retrieve_prob == 0.5
    assert cfg.retrieval_advantage_weight == 0.2 and cfg.importance_shaping_weight == 0.05
    assert cfg.max_tool_calls == 3 and cfg.step_entropy == "topk"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_generations=4, num_hybrid_generations=5), "num_hybrid_generations"),
        (dict(retrieve_prob=1.5), "retrieve_prob"),
        (dict(retrieve_prob_schedule="sometimes"), "retrieve_prob_schedule"),
        (dict(step_entropy="mean"), "step_entropy"),
        (dict(importance_shaping_weight=-1.0), "importance_shaping_weight"),
        (dict(max_turn_tokens=0), "max_turn_tokens"),
    ],
)
def test_invalid_values_name_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make(**kwargs)
