"""An agent acting on a TRL environment, as GRPOTrainer(environment_factory=...) runs one: a fresh environment per
rollout, whose ``reset(**row)`` text is appended to the row's last message and whose public methods (with any
standalone functions) are the JSON tools the chat template shows. Used to fill a trace store with RL's own questions
(``rapo_trl.store.build_from_environment``) by the model of your choice."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from rapo_trl.core.rows import RolloutRow
from rapo_trl.rollout.backends import SamplingSettings, TransformersBackend
from rapo_trl.rollout.chat_tools import environment_tools, tool_table, training_chat_template
from rapo_trl.rollout.engine import HybridRolloutEngine, RolloutConfig
from rapo_trl.tools.timed_call import DEFAULT_TIMEOUT_S


@dataclass
class Episode:
    """One rollout on one environment."""

    prompt: list[dict]
    """The row's conversation after ``reset``, as the policy saw it (before the tool schemas)."""
    row: RolloutRow
    """The rollout: token ids, loss mask, segments and the completion's chat messages."""
    environment: object
    """The environment the rollout acted on, in its final state (``get_reward`` reads it)."""


def observed_prompt(environment, row: dict) -> list[dict]:
    """``row["prompt"]`` with ``environment.reset(**row)``'s text appended to its last message, as TRL does."""
    messages = row.get("prompt") or [{"role": "user", "content": ""}]
    if isinstance(messages, str) or not all(isinstance(message, dict) for message in messages):
        raise ValueError(f"an environment's rows need conversational prompts (lists of chat messages, as TRL's "
                         f"environments take them), got {type(messages).__name__} {str(messages)[:60]!r}.")
    prompt = [dict(message) for message in messages]
    if environment is None:  # standalone JSON tools only: the prompt as it is
        return prompt
    if not callable(getattr(environment, "reset", None)):
        raise ValueError(f"Each environment returned by environment_factory must define a callable reset (as TRL's "
                         f"GRPOTrainer requires); {type(environment).__name__} has none.")
    observation = environment.reset(**row)
    if observation is None:
        return prompt
    # As GRPOTrainer joins them: a text observation and a message of content blocks (or the other way round) become
    # content blocks.
    content = prompt[-1]["content"]
    if isinstance(observation, list) and isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if isinstance(observation, str) and isinstance(content, list):
        observation = [{"type": "text", "text": observation}]
    prompt[-1]["content"] = content + observation
    return prompt


def environment_factories(environment_factory) -> dict | None:
    """``environment_factory`` as GRPOTrainer reads it: a dict maps the names a row's ``environment`` column gives to
    factories; a class or callable is the one environment (under ``None``) of every row; ``None``: no environment."""
    if environment_factory is None:
        return None
    factories = dict(environment_factory) if isinstance(environment_factory, dict) else {None: environment_factory}
    for name, factory in factories.items():
        if not callable(factory):
            where = "" if name is None else f" {name!r}"
            raise TypeError(f"environment_factory{where} must be a class or a callable returning an environment (or "
                            f"a dict of them by name), got {type(factory).__name__}.")
    return factories


class EnvironmentAgent:
    """Rollouts of a model on fresh environments from ``environment_factory``.

    Args:
        model: a causal LM; tokenizer: its tokenizer (its chat template renders the tools and their results; where
            it is not prefix-preserving and there are tools, TRL's training template for it, as GRPOTrainer given
            tools renders them).
        environment_factory: a class or callable returning an environment (``reset``, tool methods, optionally
            ``get_reward``), or a dict of them by name, each row naming its own in an ``environment`` column (not
            passed to ``reset``), as GRPOTrainer takes it; ``None`` for ``tools`` alone (a store for a trainer given
            ``tools=[fn]`` as JSON tool calls).
        tools: standalone JSON tools (plain typed functions) beside the environment's methods.
        config: budgets (JSON tool calls; the agent never retrieves).
        sampling: sampling settings; batch_size: rollouts generated together.
    """

    def __init__(self, model, tokenizer, environment_factory: Callable | dict[str, Callable] | None,
                 tools: Sequence[Callable] = (), config: RolloutConfig | None = None,
                 sampling: SamplingSettings | None = None, batch_size: int = 8):
        self.factories = environment_factories(environment_factory)
        self.tokenizer = tokenizer
        self.environment_factory = environment_factory
        self.tools = tool_table(tools)
        self.batch_size = batch_size
        config = replace(config or RolloutConfig(), tool_protocol="json")
        if config.chat_template is None and self._has_tools():
            config = replace(config, chat_template=training_chat_template(tokenizer))
        self.engine = HybridRolloutEngine(tokenizer, TransformersBackend(model, tokenizer, sampling), (), None, config)

    @classmethod
    def from_pretrained(cls, path: str, environment_factory: Callable | dict[str, Callable] | None,
                        tools: Sequence[Callable] = (), max_completion_length: int = 1024,
                        max_turn_tokens: int = 512, temperature: float = 1.0,
                        batch_size: int = 8, device: str | None = None, dtype=None,
                        json_tool_timeout: float | None = DEFAULT_TIMEOUT_S,
                        chat_template_kwargs: dict | None = None) -> EnvironmentAgent:
        """An agent for the model at ``path`` on ``device`` in ``dtype`` (default: from the hardware), its prompts
        and tool results rendered with ``chat_template_kwargs`` (``RolloutConfig.chat_template_kwargs``)."""
        from rapo_trl.rollout.agent import load_policy

        model, tokenizer = load_policy(path, device=device, dtype=dtype)
        config = RolloutConfig(max_completion_length=max_completion_length, max_turn_tokens=max_turn_tokens,
                               json_tool_timeout=json_tool_timeout, chat_template_kwargs=dict(chat_template_kwargs or {}))
        return cls(model, tokenizer, environment_factory, tools, config, SamplingSettings(temperature=temperature),
                   batch_size)

    def episodes(self, rows: Sequence[dict]) -> list[Episode]:
        """One episode per dataset row (a dict with ``prompt``, chat messages, and the columns ``reset`` takes)."""
        done: list[Episode] = []
        for start in range(0, len(rows), self.batch_size):
            batch = rows[start : start + self.batch_size]
            environments = [self._environment(row) for row in batch]
            prompts = [observed_prompt(env, self._reset_columns(row)) for env, row in zip(environments, batch)]
            tables = [{**self.tools, **(environment_tools(env) if env is not None else {})} for env in environments]
            prompt_ids = [self._prompt_ids(prompt, table) for prompt, table in zip(prompts, tables)]
            rolled = self.engine.run(prompt_ids, retrieval_enabled=False, row_tools=tables)
            done += [Episode(p, r, e) for p, r, e in zip(prompts, rolled, environments)]
        return done

    def _prompt_ids(self, prompt: list[dict], tools: dict) -> list[int]:
        """``prompt`` rendered for generation with the schemas of ``tools``, with the template and its arguments the
        engine renders tool results with (``RolloutConfig.chat_template`` and ``chat_template_kwargs``): one format
        for the whole episode, the one RL renders the policy's with."""
        config = self.engine.config
        return list(self.tokenizer.apply_chat_template(prompt, tools=list(tools.values()) or None,
                                                       chat_template=config.chat_template, add_generation_prompt=True,
                                                       tokenize=True, return_dict=False,
                                                       **(config.chat_template_kwargs or {})))

    def _has_tools(self) -> bool:
        """Whether the policy has tools to call, as GRPOTrainer decides it when it is made (it swaps the template only
        then): standalone tools, or the tool methods of one instance of any environment. An environment's methods are
        known only from an instance (a factory may be any callable), so each factory is called once, as the trainer
        calls it."""
        return bool(self.tools) or any(environment_tools(factory()) for factory in (self.factories or {}).values())

    @property
    def _named(self) -> bool:
        """Whether rows choose their environment by name (a dict ``environment_factory``)."""
        return isinstance(self.environment_factory, dict)

    def _environment(self, row):
        """A fresh environment of the kind ``row`` uses (``None`` without an ``environment_factory``)."""
        if self.factories is None:
            return None
        name = row.get("environment") if self._named else None
        if name not in self.factories:
            raise ValueError(f"A row has environment={name!r}, which is not among the environments passed to "
                             f"environment_factory. Expected one of: {list(self.factories)}.")
        return self.factories[name]()

    def _reset_columns(self, row) -> dict:
        """The row as ``reset`` gets it: with named environments, the ``environment`` column only chooses one."""
        row = dict(row)
        if self._named:
            row.pop("environment", None)
        return row
