"""Retrieval options seen through a training step: p's schedule, the step entropy estimator's settings and what
the reward functions are shown."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from tests.helpers.fakes import FixedStore, Found
from tests.helpers.scripted import uniform_entropies
from tests.helpers.trainers import batch_inputs, rapo_trainer, script

SEVENS_STEP = "<think>77</think>"  # a stored step whose 7s a reward function would count


def scored_step(tiny_model_dir, tmp_path, global_step=0, max_steps=0, **options):
    trainer = rapo_trainer(tiny_model_dir, tmp_path, store=FixedStore(SEVENS_STEP), num_hybrid_generations=2,
                           **options)
    trainer.state.global_step, trainer.state.max_steps = global_step, max_steps
    script(trainer)
    trainer.model.train()
    trainer._generate_and_score_completions(batch_inputs())
    return trainer, trainer._metrics["train"]["rapo/retrieve_prob"][-1]


def test_a_decaying_p_retrieves_at_the_start_and_not_at_the_end(tiny_model_dir, tmp_path):
    options = dict(retrieve_prob=1.0, retrieve_prob_final=0.0)
    start, p_start = scored_step(tiny_model_dir, tmp_path, global_step=0, max_steps=4, **options)
    end, p_end = scored_step(tiny_model_dir, tmp_path, global_step=4, max_steps=4, **options)
    assert (p_start, p_end) == (1.0, 0.0)
    assert [len(row.retrievals) for row in start.last_rollout.rows] == [1, 1, 0, 0]
    assert not any(row.retrievals for row in end.last_rollout.rows)


@pytest.mark.parametrize("settings", [{}, dict(step_entropy_top_k=2, step_entropy_first_tokens=3)],
                         ids=["defaults", "set"])
def test_the_step_entropy_settings_shape_each_steps_entropy(tiny_model_dir, tmp_path, settings):
    trainer, _ = scored_step(tiny_model_dir, tmp_path, retrieve_prob=1.0, **settings)
    top_k, first_tokens = settings.get("step_entropy_top_k", 10), settings.get("step_entropy_first_tokens", 20)
    # row 0's first step, "<python>1</python>", is sampled uniformly over 8 tokens: "topk" sums its first tokens' top-k
    step_tokens = len(AutoTokenizer.from_pretrained(tiny_model_dir)("<python>1</python>",
                                                                    add_special_tokens=False)["input_ids"])
    per_token = uniform_entropies(8, trainer.model.config.vocab_size, top_k=top_k)[1]
    got = trainer.last_rollout.rows[0].policy_steps[0].entropy
    assert got == pytest.approx(min(step_tokens, first_tokens) * per_token, rel=1e-5)


def test_reward_functions_see_retrieved_blocks_only_when_asked(tiny_model_dir, tmp_path):
    hidden, _ = scored_step(tiny_model_dir, tmp_path, retrieve_prob=1.0)
    shown, _ = scored_step(tiny_model_dir, tmp_path, retrieve_prob=1.0, score_retrieved_blocks=True)
    assert [len(row.retrievals) for row in shown.last_rollout.rows] == [1, 1, 0, 0]
    # the two hybrid rows each retrieved one block holding two 7s; the on-policy rows score alike
    extra = shown.last_rollout.rewards - hidden.last_rollout.rewards
    assert extra.tolist() == [2.0, 2.0, 0.0, 0.0]


class SettingsStore:
    """A store that would take selection settings at select time, and remembers those it was given."""

    def __init__(self):
        self.settings = []

    def select(self, contexts, top_k=None, min_reward=None, fallback_text=None):
        self.settings.append((top_k, min_reward, fallback_text))
        return [Found("<think>a step</think>") for _ in contexts]


def test_the_trainer_leaves_selection_to_the_stores_own_settings(tiny_model_dir, tmp_path):
    store = SettingsStore()
    trainer = rapo_trainer(tiny_model_dir, tmp_path, store=store, num_hybrid_generations=2, retrieve_prob=1.0)
    script(trainer)
    trainer.model.train()
    trainer._generate_and_score_completions(batch_inputs())
    assert store.settings and set(store.settings) == {(None, None, None)}
