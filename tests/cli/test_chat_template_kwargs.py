"""A recipe's ``chat_template_kwargs`` (e.g. ``enable_thinking: false`` for a Qwen3-style template) render every
prompt of a run, not RL's alone (TRL renders those with them): the warm start's examples, the store builder's agents'
prompts and ``rapo eval``'s. Rendered with the template's defaults instead, the model would be warm-started, store-fed
and scored on another prompt format than the one RL trains it on."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rapo_trl.embeddings import HashingEmbedder
from rapo_trl.store import TraceStore

NO_THINKING = "[no thinking]\n"
"""What the test template writes at the head of a conversation rendered with ``enable_thinking=False``."""
KWARGS = {"enable_thinking": False}
PROMPT = [{"role": "user", "content": "What is six times seven?"}]
TRAJECTORY = ("<think>Multiply.</think>\n<python>\nprint(6 * 7)\n</python>\n<result>\n42\n</result>\n"
              "<answer>\\boxed{42}</answer>")


@pytest.fixture
def marked(tiny_model):
    """The tiny model, its tokenizer's chat template writing ``NO_THINKING`` when ``enable_thinking`` is false."""
    from trl.chat_template_utils import add_response_schema

    model, tokenizer = tiny_model
    add_response_schema(tokenizer)  # how JSON tool calls parse, known for the Qwen template but not the marked one
    tokenizer.chat_template = ("{% if enable_thinking is defined and not enable_thinking %}" + NO_THINKING
                               + "{% endif %}" + tokenizer.chat_template)
    return model, tokenizer


def recipe(tmp_path, chat_template_kwargs=KWARGS):
    """A recipe's RAPOConfig with a small rollout budget."""
    from rapo_trl import RAPOConfig

    return RAPOConfig(output_dir=str(tmp_path / "out"), use_cpu=True, max_completion_length=8, max_turn_tokens=8,
                      chat_template_kwargs=chat_template_kwargs)


def rendered_prompts(monkeypatch) -> list[list[int]]:
    """The prompt ids every rollout engine is given from now on (filled as they run)."""
    from rapo_trl.rollout.engine import HybridRolloutEngine

    seen: list[list[int]] = []
    run = HybridRolloutEngine.run

    def recording(self, prompt_ids, *args, **kwargs):
        seen.extend(list(ids) for ids in prompt_ids)
        return run(self, prompt_ids, *args, **kwargs)

    monkeypatch.setattr(HybridRolloutEngine, "run", recording)
    return seen


def test_rapo_eval_renders_its_prompts_with_the_recipes_kwargs(marked, tmp_path, monkeypatch):
    from rapo_trl.cli.model_scoring import score_loaded

    model, tokenizer = marked
    seen = rendered_prompts(monkeypatch)
    rows = {"prompt": [PROMPT], "answer": ["42"]}
    score_loaded(model, tokenizer, rows, [], recipe(tmp_path), 1, True, "eval", samples=1, progress=False)
    assert len(seen) == 2  # the greedy rollout and the sampled one
    assert all(tokenizer.decode(ids).startswith(NO_THINKING) for ids in seen)


def test_unset_kwargs_render_the_prompt_as_the_template_does_by_default(marked, tmp_path, monkeypatch):
    # Learning records stay comparable: a recipe without the kwargs gets the very tokens it got before.
    from rapo_trl.cli.model_scoring import score_loaded

    model, tokenizer = marked
    seen = rendered_prompts(monkeypatch)
    score_loaded(model, tokenizer, {"prompt": [PROMPT], "answer": ["42"]}, [], recipe(tmp_path, None), 1, True,
                 "eval", progress=False)
    assert seen == [list(tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, tokenize=True,
                                                       return_dict=False))]


def test_the_store_builders_model_agent_renders_with_the_recipes_kwargs(marked, tmp_path, monkeypatch):
    from rapo_trl.cli import build_store

    model, tokenizer = marked
    monkeypatch.setattr(build_store, "_agent_model", lambda script, rapo_args, model_args: marked)
    agent = build_store._model_agent(SimpleNamespace(), recipe(tmp_path), SimpleNamespace(), [])
    (row,) = agent.rollouts([PROMPT])
    assert tokenizer.decode(row.prompt_ids).startswith(NO_THINKING)


def test_the_store_builders_environment_agent_renders_with_the_recipes_kwargs(marked, tmp_path, monkeypatch):
    from rapo_trl.cli import build_store

    model, tokenizer = marked
    monkeypatch.setattr(build_store, "_agent_model", lambda script, rapo_args, model_args: marked)
    script = SimpleNamespace(environment_factory="tests.helpers.environments.Counter", tools=None)
    agent = build_store._environment_agent(script, recipe(tmp_path), SimpleNamespace())
    (episode,) = agent.episodes([{"prompt": PROMPT}])
    assert tokenizer.decode(episode.row.prompt_ids).startswith(NO_THINKING)
    assert agent.engine.config.chat_template_kwargs == KWARGS  # its tool results are rendered with them too


def _store_and_rows(tmp_path):
    from datasets import Dataset

    store = TraceStore(tmp_path / "store", embedder=HashingEmbedder())
    store.add_trajectories([TRAJECTORY], [1.0], ["q1"], prompts=["What is six times seven?"])
    return store, Dataset.from_list([{"prompt": PROMPT, "question_id": "q1"}])


def test_the_warm_starts_chat_examples_render_with_the_kwargs(marked, tmp_path):
    # SFT renders chat examples itself, with the kwargs an example carries (TRL's chat_template_kwargs column).
    from trl.data_utils import apply_chat_template

    from rapo_trl.cli.warm_start import warm_start_examples

    _, tokenizer = marked
    store, rows = _store_and_rows(tmp_path)
    (example,) = warm_start_examples(rows, store, 1.0, tokenizer, chat_template_kwargs=KWARGS)
    assert apply_chat_template(example, tokenizer)["prompt"].startswith(NO_THINKING)
    (plain,) = warm_start_examples(rows, store, 1.0, tokenizer)
    assert "chat_template_kwargs" not in plain  # unset: the examples, and the cache key over them, as before


def test_the_warm_starts_tokenized_examples_render_with_the_kwargs(marked, tmp_path):
    from rapo_trl.cli.warm_start import warm_start_examples

    _, tokenizer = marked
    store, rows = _store_and_rows(tmp_path)
    examples = warm_start_examples(rows, store, 1.0, tokenizer, retrieved_share=1.0, chat_template_kwargs=KWARGS)
    assert len(examples) == 2  # the whole trajectory and one with a retrieved step
    assert all(tokenizer.decode(e["input_ids"]).startswith(NO_THINKING) for e in examples)


def test_a_warm_start_made_under_other_kwargs_is_trained_again(marked, tiny_model_dir, tmp_path, capsys):
    from rapo_trl.cli.warm_start import warm_start

    _, tokenizer = marked
    store, rows = _store_and_rows(tmp_path)
    common = dict(min_reward=1.0, use_cpu=True, seed=0, bf16=False, batch_size=1, learning_rate=1e-3, steps=1)
    out = str(tmp_path / "out")
    warm_start(str(tiny_model_dir), tokenizer, rows, store, out, **common)
    capsys.readouterr()
    warm_start(str(tiny_model_dir), tokenizer, rows, store, out, chat_template_kwargs=KWARGS, **common)
    assert "Warm start reused" not in capsys.readouterr().out
    warm_start(str(tiny_model_dir), tokenizer, rows, store, out, chat_template_kwargs=KWARGS, **common)
    assert "Warm start reused" in capsys.readouterr().out


@pytest.fixture
def marked_dir(marked, tmp_path):
    """The marked model and tokenizer saved to a folder, as ``from_pretrained`` loads them."""
    model, tokenizer = marked
    folder = tmp_path / "marked"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_a_model_agent_from_pretrained_renders_with_the_kwargs(marked_dir):
    from rapo_trl.rollout.agent import RolloutAgent

    agent = RolloutAgent.from_pretrained(str(marked_dir), device="cpu", dtype="fp32", chat_template_kwargs=KWARGS,
                                         engine={"reuse_kv": False})
    assert agent.tokenizer.decode(agent.prompt_ids(PROMPT)).startswith(NO_THINKING)
    assert agent.engine.backend.decoder is None  # the backend settings are passed on too


def test_an_environment_agent_from_pretrained_renders_with_the_kwargs(marked_dir):
    from rapo_trl.rollout.environment_agent import EnvironmentAgent
    from tests.helpers.environments import Counter

    agent = EnvironmentAgent.from_pretrained(str(marked_dir), Counter, max_completion_length=8, max_turn_tokens=8,
                                             device="cpu", dtype="fp32", chat_template_kwargs=KWARGS)
    (episode,) = agent.episodes([{"prompt": PROMPT}])
    assert agent.tokenizer.decode(episode.row.prompt_ids).startswith(NO_THINKING)
    assert agent.engine.config.chat_template_kwargs == KWARGS  # its tool results are rendered with them too
