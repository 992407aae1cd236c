"""The engine's sampling settings and config come from the RAPOConfig, as TRL's generation does."""

from __future__ import annotations

import dataclasses

import pytest

from rapo_trl.config import RAPOConfig
from rapo_trl.rollout import RolloutConfig
from rapo_trl.trainer.backend import rollout_config, sampling_settings


def config(tmp_path, **kwargs):
    return RAPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", num_generations=4,
                      per_device_train_batch_size=4, **kwargs)


def test_generation_kwargs_override_the_config_sampling_fields(tmp_path):
    sampling = sampling_settings(config(tmp_path, temperature=0.7, top_p=0.9, generation_kwargs={
        "temperature": 0.3, "top_k": None, "typical_p": 0.8}))
    assert (sampling.temperature, sampling.top_p, sampling.top_k) == (0.3, 0.9, 0)
    assert sampling.extra == {"typical_p": 0.8}  # unknown to the engine: passed on to the backend


def test_options_the_engine_owns_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"generation_kwargs\['max_new_tokens'\] is set by RAPO's multi-turn engine"):
        sampling_settings(config(tmp_path, generation_kwargs={"max_new_tokens": 5}))


def test_every_engine_field_with_a_config_namesake_is_passed(tmp_path):
    values = dict(max_completion_length=77, max_turn_tokens=11, max_tool_calls=3, retrieve_prob=0.25,
                  step_entropy="full", step_entropy_first_tokens=5, tool_workers=2, json_tool_timeout=None,
                  answer_stop="</answer>",
                  max_retrieved_tokens=40, retrieve_at=("start", "tool_step"), retrieve_own_question=True,
                  retrieved_step_as_own=True)
    engine = rollout_config(config(tmp_path, **values))
    shared = {f.name for f in dataclasses.fields(RolloutConfig)} & set(RAPOConfig.__dataclass_fields__)
    # the protocol's fields come resolved by the trainer ("auto" -> tags or json; the template's kwargs with json)
    protocol = {"tool_protocol", "chat_template_kwargs"}
    assert shared == set(values) | protocol
    assert {name: getattr(engine, name) for name in values} == values
    assert engine.tool_protocol == "tags"
    # a field named for the trainer's user (a tool's result, not the engine's), passed all the same
    assert rollout_config(config(tmp_path, max_tool_result_chars=None)).max_result_chars is None
    assert rollout_config(config(tmp_path, max_tool_result_chars=123)).max_result_chars == 123
    assert RAPOConfig.__dataclass_fields__["max_tool_result_chars"].default == RolloutConfig.max_result_chars
    # JSON rollouts retrieve after tool steps only, as <retrieve> blocks
    json_values = {**values, "retrieve_at": ("tool_step",), "retrieved_step_as_own": False}
    chosen = rollout_config(config(tmp_path, **json_values), tool_protocol="json",
                            chat_template_kwargs={"enable": True})
    assert chosen.tool_protocol == "json" and chosen.chat_template_kwargs == {"enable": True}


def test_the_json_tool_timeout_defaults_agree():
    # RAPOConfig's default is a literal (the CLI reads defaults from source); the engine's and tools' is the constant.
    from rapo_trl.tools.timed_call import DEFAULT_TIMEOUT_S

    assert RAPOConfig.__dataclass_fields__["json_tool_timeout"].default == RolloutConfig.json_tool_timeout
    assert RolloutConfig.json_tool_timeout == DEFAULT_TIMEOUT_S
