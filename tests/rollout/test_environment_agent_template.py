"""An `EnvironmentAgent` renders its episodes with the chat template RL trains on. GRPOTrainer given tools swaps a
template that is not prefix-preserving (Qwen3's) for TRL's training one, which renders earlier assistant turns and
tool results differently: a store built with the tokenizer's own template would hold rollouts in a format the policy
never sees in RL (or, for tool results, none at all: the own template cannot append them)."""

from __future__ import annotations

from pathlib import Path

import trl
from transformers import AutoModelForCausalLM, AutoTokenizer

from rapo_trl.config import RAPOConfig
from rapo_trl.rollout import EnvironmentAgent, RolloutConfig
from rapo_trl.rollout.chat_tools import environment_tools
from rapo_trl.rollout.environment_agent import observed_prompt
from rapo_trl.trainer import RAPOTrainer
from tests.helpers.environments import Counter, call
from tests.helpers.scripted import ScriptedGenerate, Turn
from tests.helpers.trainers import common_args, dataset

# Earlier assistant turns are where Qwen3's own template and TRL's training one part ways.
PROMPT = [{"role": "user", "content": "Hello."}, {"role": "assistant", "content": "Hi."},
          {"role": "user", "content": "Count to five."}]
TURNS = [call("add", n=5), "The total is 5.<|im_end|>"]


class Note:
    """An environment with no tool methods: ``reset`` and ``get_reward`` only, so there is nothing to call."""

    def reset(self, **kwargs) -> str:
        return " Count to five."

    def get_reward(self) -> float:
        return 1.0


def qwen3_tokenizer(model_dir):
    """The tiny tokenizer carrying the Qwen3 chat template that TRL ships (not prefix-preserving)."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen3.jinja").read_text()
    return tokenizer


def scripted_model(model_dir, tokenizer, turns=TURNS):
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    model.generate = ScriptedGenerate(tokenizer, [([], [Turn(t) for t in turns])], model.config.vocab_size)
    return model


def trainer_rollout(model_dir, tmp_path, tokenizer, environment=Counter, turns=TURNS):
    """The rollout RL makes of ``PROMPT``: the trainer's prompt rendering (the environment's ``reset`` text appended,
    as a training step appends it) and its rollout engine."""
    args = RAPOConfig(**common_args(tmp_path, max_completion_length=256), max_turn_tokens=128, retrieve_prob=0.0)
    trainer = RAPOTrainer(scripted_model(model_dir, tokenizer, turns),
                          lambda completions, **kw: [0.0] * len(completions), args=args, train_dataset=dataset(),
                          processing_class=tokenizer, environment_factory=environment)
    trainer._batch_environments = [None]  # the step's rows, as a training step sets them: the one environment
    prompt_ids = trainer._tokenize_prompts([observed_prompt(environment(), {"prompt": PROMPT})])[0]
    return trainer.rollout_engine.run(prompt_ids, retrieval_enabled=False,
                                      row_tools=[environment_tools(environment())])[0]


def agent_rollout(model_dir, tokenizer, environment=Counter, turns=TURNS):
    agent = EnvironmentAgent(scripted_model(model_dir, tokenizer, turns), tokenizer, environment,
                             config=RolloutConfig(max_completion_length=256, max_turn_tokens=128))
    return agent.episodes([{"prompt": PROMPT}])[0].row


def test_a_qwen3_agent_renders_its_episode_as_rl_does(tiny_model_dir, tmp_path):
    trained = trainer_rollout(tiny_model_dir, tmp_path, qwen3_tokenizer(tiny_model_dir))
    episode = agent_rollout(tiny_model_dir, qwen3_tokenizer(tiny_model_dir))
    assert episode.tool_calls == trained.tool_calls == 1
    assert episode.prompt_ids == trained.prompt_ids
    assert episode.completion_ids == trained.completion_ids


def test_an_agent_whose_template_trl_keeps_renders_with_it(tiny_model_dir):
    # Qwen2.5's template is prefix-preserving: TRL trains on it as it is, and the agent's ids stay the template's own.
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    episode = agent_rollout(tiny_model_dir, tokenizer)
    tools = list(environment_tools(Counter()).values())
    assert episode.prompt_ids == list(tokenizer.apply_chat_template(PROMPT, tools=tools, add_generation_prompt=True,
                                                                    tokenize=True, return_dict=False))


def test_an_agent_on_an_environment_without_tools_keeps_the_template_as_rl_does(tiny_model_dir, tmp_path):
    # GRPOTrainer swaps Qwen3's template for its training one only when the policy has tools to call: with none, RL
    # renders the prompt with the tokenizer's own template, and so does the agent.
    turns = ["The total is 5.<|im_end|>"]
    trained = trainer_rollout(tiny_model_dir, tmp_path, qwen3_tokenizer(tiny_model_dir), Note, turns)
    episode = agent_rollout(tiny_model_dir, qwen3_tokenizer(tiny_model_dir), Note, turns)
    tokenizer = qwen3_tokenizer(tiny_model_dir)
    observed = observed_prompt(Note(), {"prompt": PROMPT})
    assert trained.prompt_ids == list(tokenizer.apply_chat_template(observed, add_generation_prompt=True,
                                                                    tokenize=True, return_dict=False))
    assert episode.prompt_ids == trained.prompt_ids
    assert episode.completion_ids == trained.completion_ids and episode.tool_calls == trained.tool_calls == 0
