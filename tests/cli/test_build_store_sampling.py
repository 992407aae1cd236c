"""`rapo build-store`'s agents sample as the recipe's training rollouts do (the trainer's `sampling_settings`: its
top_p, top_k, min_p, repetition penalty and ``generation_kwargs``, not its temperature alone), so a store holds steps
drawn from the distribution the policy trains with; a recipe at the default settings samples as it always did."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

ENVIRONMENT_SCRIPT = SimpleNamespace(environment_factory="tests.helpers.environments.Counter", tools=None)


def recipe(tmp_path, **sampling):
    from rapo_trl import RAPOConfig

    return RAPOConfig(output_dir=str(tmp_path / "out"), use_cpu=True, max_completion_length=8, max_turn_tokens=8,
                      **sampling)


def model_agent_sampling(rapo_args):
    from rapo_trl.cli import build_store

    return build_store._model_agent(SimpleNamespace(), rapo_args, SimpleNamespace(), []).engine.backend


def environment_agent_sampling(rapo_args):
    from rapo_trl.cli import build_store

    return build_store._environment_agent(ENVIRONMENT_SCRIPT, rapo_args, SimpleNamespace()).engine.backend


AGENTS = [pytest.param(model_agent_sampling, id="model_agent"),
          pytest.param(environment_agent_sampling, id="environment_agent")]


@pytest.fixture
def loaded(tiny_model, monkeypatch):
    from rapo_trl.cli import build_store

    monkeypatch.setattr(build_store, "_agent_model", lambda script, rapo_args, model_args: tiny_model)
    return tiny_model


@pytest.mark.parametrize("backend_of", AGENTS)
def test_the_store_builders_agent_samples_with_the_recipes_settings(loaded, tmp_path, backend_of):
    from rapo_trl.trainer.backend import sampling_settings

    rapo_args = recipe(tmp_path, temperature=0.7, top_p=0.9, top_k=20, min_p=0.05, repetition_penalty=1.1,
                       generation_kwargs={"typical_p": 0.95})
    backend = backend_of(rapo_args)
    assert backend.sampling == sampling_settings(rapo_args)
    config = backend._generation_config(loaded[0], 8, [])
    assert (config.temperature, config.top_p, config.top_k, config.min_p) == (0.7, 0.9, 20, 0.05)
    assert (config.repetition_penalty, config.typical_p) == (1.1, 0.95)


@pytest.mark.parametrize("backend_of", AGENTS)
def test_at_default_settings_the_store_builders_agent_samples_as_before(loaded, tmp_path, backend_of):
    # The temperature alone, as the agents were given it: a default recipe's store is drawn as it always was.
    from rapo_trl.rollout.backends import SamplingSettings, TransformersBackend

    model, tokenizer = loaded
    rapo_args = recipe(tmp_path, temperature=0.8)
    backend = backend_of(rapo_args)
    before = SamplingSettings(temperature=0.8)
    assert backend.sampling == before
    expected = TransformersBackend(model, tokenizer, before)._generation_config(model, 8, [])
    assert backend._generation_config(model, 8, []).to_dict() == expected.to_dict()
