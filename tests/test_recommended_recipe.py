"""RECOMMENDED_RETRIEVAL: the demo's measured retrieval as RAPOConfig fields, the same values the demo recipe runs."""

from pathlib import Path

import yaml

from rapo_trl import RECOMMENDED_RETRIEVAL, RAPOConfig

DEMO = Path(__file__).resolve().parents[1] / "configs" / "demo_cpu.yaml"


def test_the_recommended_retrieval_makes_a_config_that_carries_it(tmp_path):
    config = RAPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", **RECOMMENDED_RETRIEVAL)
    assert config.retrieve_at == ["plan"] and config.retrieve_own_question is True
    assert config.retrieve_failed_groups_max_reward == 0.0 and config.retrieve_prob == 1.0
    assert config.retrieved_token_loss_weight == 2.0 and config.retrieved_token_shaping is None
    assert RECOMMENDED_RETRIEVAL["retrieve_at"] == ["plan"]  # the config's own copy, the constant untouched


def test_the_recommended_retrieval_is_the_demo_recipes():
    demo = yaml.safe_load(DEMO.read_text())
    assert {name: demo[name] for name in RECOMMENDED_RETRIEVAL} == RECOMMENDED_RETRIEVAL


def test_the_defaults_stay_the_papers():
    defaults = RAPOConfig(output_dir="unused", use_cpu=True, report_to="none")
    assert all(getattr(defaults, name) != value for name, value in RECOMMENDED_RETRIEVAL.items())
