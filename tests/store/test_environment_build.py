"""A store filled by an agent acting on a TRL environment: its steps are keyed by the context exactly as a hybrid
rollout on that environment queries the store, and the best rollouts by reward (reward functions plus
``get_reward``) are the ones kept."""

from __future__ import annotations

from rapo_trl.embeddings import HashingEmbedder
from rapo_trl.rollout import EnvironmentAgent, RolloutConfig
from rapo_trl.store import TraceStore, build_from_environment
from tests.helpers.environments import Counter, SqliteCounter, call
from tests.helpers.scripted import ScriptedGenerate, Turn

ROWS = [{"prompt": [{"role": "user", "content": "Count to five."}], "question_id": "five"}]
GOOD = [call("add", "Adding two.", n=2), call("add", n=3), "The total is 5.<|im_end|>"]
POOR = [call("add", n=1), "The total is 1.<|im_end|>"]


def _agent(tiny_model, scripts, environment_factory=Counter, **config):
    model, tokenizer = tiny_model
    model.generate = ScriptedGenerate(tokenizer, [([], [Turn(t) for t in turns]) for turns in scripts],
                                      model.config.vocab_size)
    return EnvironmentAgent(model, tokenizer, environment_factory,
                            config=RolloutConfig(max_completion_length=300, max_turn_tokens=100, **config))


def test_best_rollouts_are_stored_keyed_as_the_policy_queries(tiny_model, tmp_path):
    store = TraceStore(tmp_path / "store", embedder=HashingEmbedder(64))
    agent = _agent(tiny_model, [POOR, GOOD])
    added = build_from_environment(store, agent, ROWS, num_samples=2, keep_top_k=1)

    assert added == 3  # the good rollout's three turns: two tool steps and the answer
    records = store.collection.get(include=["metadatas", "documents"])
    by_step = sorted(zip(records["metadatas"], records["documents"]), key=lambda r: r[0]["step_index"])
    assert [m["reward"] for m, _ in by_step] == [5.0] * 3  # get_reward of the environment
    assert {m["question_id"] for m, _ in by_step} == {"five"}

    # The key of the second step is the context a hybrid rollout of the same question has after its first step.
    episode = _agent(tiny_model, [GOOD]).episodes(ROWS)[0]
    row, tok = episode.row, agent.tokenizer
    first_tool = [s for s in row.segments if s.kind == "tool"][0]
    query = "Count to five.\n" + tok.decode(row.completion_ids[:first_tool.end], skip_special_tokens=True)
    assert store.preprocess(query) in [document for _, document in by_step]
    selected = store.select([query])[0]
    assert selected.text.startswith('<tool_call>\n{"name": "add", "arguments": {"n": 3}}')
    assert selected.text.endswith("<result>\n5\n</result>")


def test_a_thread_bound_environment_fills_the_store_with_calls_on_the_agents_thread(tiny_model, tmp_path):
    store = TraceStore(tmp_path / "store", embedder=HashingEmbedder(64))
    agent = _agent(tiny_model, [GOOD], SqliteCounter, json_tool_timeout=None)
    assert build_from_environment(store, agent, ROWS, num_samples=1, keep_top_k=1) == 3
    metadatas = store.collection.get(include=["metadatas"])["metadatas"]
    assert [m["reward"] for m in metadatas] == [5.0] * 3  # on worker threads every sqlite call fails: total 0


def test_a_store_for_json_tools_alone_is_filled_by_an_agent_without_an_environment(tiny_model, tmp_path):
    from tests.helpers.environments import multiply

    model, tokenizer = tiny_model
    turns = [call("multiply", "Multiplying.", a=6, b=7), "It is 42.<|im_end|>"]
    model.generate = ScriptedGenerate(tokenizer, [([], [Turn(t) for t in turns])], model.config.vocab_size)
    agent = EnvironmentAgent(model, tokenizer, None, tools=[multiply],
                             config=RolloutConfig(max_completion_length=300, max_turn_tokens=100))
    store = TraceStore(tmp_path / "store", embedder=HashingEmbedder(64))

    def says_42(completions, **kwargs):
        return [float("42" in str(c[-1]["content"])) for c in completions]

    rows = [{"prompt": [{"role": "user", "content": "What is 6 times 7?"}], "question_id": "six-sevens"}]
    assert build_from_environment(store, agent, rows, says_42, num_samples=1, keep_top_k=1) == 2
    step = store.select(["What is 6 times 7?"])[0]
    assert step.text.startswith('Multiplying.\n<tool_call>\n{"name": "multiply", "arguments": {"a": 6, "b": 7}}')
    assert step.text.endswith("<result>\n42\n</result>") and step.question_id == "six-sevens"


def test_a_question_id_of_zero_is_the_rows_and_a_plain_text_prompt_is_named(tiny_model, tmp_path):
    import pytest

    store = TraceStore(tmp_path / "store", embedder=HashingEmbedder(64))
    rows = [{**ROWS[0], "question_id": 0}]  # the trainer asks for its own question as "0"
    assert build_from_environment(store, _agent(tiny_model, [GOOD]), rows, num_samples=1, keep_top_k=1) == 3
    assert {m["question_id"] for m in store.collection.get(include=["metadatas"])["metadatas"]} == {"0"}
    with pytest.raises(ValueError, match="an environment's rows need conversational prompts"):
        build_from_environment(store, _agent(tiny_model, [GOOD]), [{"prompt": "Count to five."}], num_samples=1)


class _Scenarios(Counter):
    """An environment whose ``reset`` sets each episode a scenario of its own, named in the observation."""

    started = 0

    def reset(self, **kwargs) -> str:
        super().reset(**kwargs)
        _Scenarios.started += 1
        return f" Scenario {_Scenarios.started}."


def test_each_rollout_is_keyed_by_the_prompt_its_own_episode_observed(tiny_model, tmp_path):
    from rapo_trl.question_ids import question_id_of

    _Scenarios.started = 0
    store = TraceStore(tmp_path / "store", embedder=HashingEmbedder(64))
    agent = _agent(tiny_model, [POOR, GOOD], _Scenarios)
    rows = [{"prompt": ROWS[0]["prompt"]}]  # no question_id: the row's own is made from its prompt
    assert build_from_environment(store, agent, rows, num_samples=2, keep_top_k=1) == 3  # the second episode's
    records = store.collection.get(include=["metadatas", "documents"])
    first = next(d for m, d in zip(records["metadatas"], records["documents"]) if m["step_index"] == 0)
    assert first == store.preprocess("Count to five. Scenario 2.\n")  # the good rollout's question, not the first's
    assert {m["question_id"] for m in records["metadatas"]} == {question_id_of("Count to five.")}
    assert store.select(["Count to five. Scenario 2.\n"])[0].text.startswith("Adding two.")


def test_episode_rewards_weigh_and_await_as_grpo_trainer_sums_them():
    """``reward_weights`` weigh the reward functions (the environment's ``get_reward`` has weight 1, as TRL adds it),
    and an ``async`` reward function or ``get_reward`` is awaited, as TRL awaits them."""
    from types import SimpleNamespace

    from rapo_trl.store.environment_build import episode_rewards

    class AsyncCounter(Counter):
        async def get_reward(self) -> float:
            return float(self.total)

    def turns(completions, **kwargs):
        return [float(len(messages)) for messages in completions]

    async def total_is_three(environments, **kwargs):
        return [float(environment.total == 3) for environment in environments]

    environments = [AsyncCounter(), AsyncCounter()]
    for environment, total in zip(environments, (3, 4)):
        environment.reset()
        environment.add(total)
    episodes = [SimpleNamespace(prompt=ROWS[0]["prompt"], environment=environment,
                                row=SimpleNamespace(messages=[{"role": "assistant", "content": "."}] * size,
                                                    completion_ids=[1] * size))
                for environment, size in zip(environments, (2, 5))]
    totals = episode_rewards(episodes, ROWS * 2, [turns, total_is_three], [0.5, 10.0])
    assert totals == [0.5 * 2 + 10.0 + 3, 0.5 * 5 + 0.0 + 4]


def test_a_nan_get_reward_is_left_out_as_grpo_trainer_leaves_it_out(tiny_model, tmp_path):
    """TRL sums the rewards with nansum, so an environment whose ``get_reward`` is NaN adds nothing; the NaN must not
    make the rollout's total NaN (sorted first and then dropped, losing the best rollout with it)."""

    class NanForOne(Counter):
        def get_reward(self) -> float:
            return float("nan") if self.total == 1 else float(self.total)

    def answered(completions, **kwargs):
        return [1.0] * len(completions)

    store = TraceStore(tmp_path / "store", embedder=HashingEmbedder(64))
    agent = _agent(tiny_model, [POOR, GOOD], NanForOne)
    assert build_from_environment(store, agent, ROWS, answered, num_samples=2, keep_top_k=1) == 3
    assert {m["reward"] for m in store.collection.get(include=["metadatas"])["metadatas"]} == {6.0}
    episodes = _agent(tiny_model, [POOR, GOOD], NanForOne).episodes(ROWS * 2)
    from rapo_trl.store.environment_build import episode_rewards

    assert episode_rewards(episodes, ROWS * 2, [answered]) == [1.0, 6.0]


def test_a_reset_observation_joins_content_blocks_as_grpo_trainer_joins_them():
    from rapo_trl.rollout.environment_agent import observed_prompt

    class Observing(Counter):
        def __init__(self, observation):
            super().__init__()
            self.observation = observation

        def reset(self, **kwargs):
            super().reset(**kwargs)
            return self.observation

    blocks = {"prompt": [{"role": "user", "content": [{"type": "text", "text": "Count."}]}]}
    text = {"prompt": [{"role": "user", "content": "Count."}]}
    block = [{"type": "text", "text": " Start at 2."}]
    expected = [{"role": "user", "content": [{"type": "text", "text": "Count."}, *block]}]
    assert observed_prompt(Observing(" Start at 2."), blocks) == expected
    assert observed_prompt(Observing(block), text) == expected
    assert observed_prompt(Observing(" Start at 2."), text) == [{"role": "user", "content": "Count. Start at 2."}]
    assert blocks["prompt"][0]["content"] == [{"type": "text", "text": "Count."}]  # the row is left as it was


def test_an_environment_without_reset_is_refused_clearly(tiny_model):
    import pytest

    class NoReset:
        def add(self, n: int) -> int:
            """Add a number.

            Args:
                n: the number to add
            """
            return n

    with pytest.raises(ValueError, match="must define a callable reset.*NoReset has none"):
        _agent(tiny_model, [GOOD], NoReset).episodes(ROWS)


def test_a_dict_environment_factory_gives_each_row_the_environment_it_names(tiny_model, tmp_path):
    """As GRPOTrainer takes it: a row's ``environment`` column names its environment, and is not passed to reset."""
    import pytest

    class Doubled(Counter):
        def get_reward(self) -> float:
            return 2.0 * self.total

    factories = {"plain": Counter, "doubled": Doubled}
    rows = [{**ROWS[0], "environment": "plain"}, {**ROWS[0], "question_id": "doubled", "environment": "doubled"}]
    agent = _agent(tiny_model, [GOOD, GOOD], factories)
    episodes = agent.episodes(rows)
    assert [type(episode.environment) for episode in episodes] == [Counter, Doubled]
    assert [episode.environment.total for episode in episodes] == [5, 5]  # each rollout's calls ran on its own
    assert [[sorted(kwargs) for kwargs in episode.environment.resets] for episode in episodes] == \
        [[["prompt", "question_id"]]] * 2
    with pytest.raises(ValueError, match=r"environment='other'.*Expected one of: \['plain', 'doubled'\]"):
        agent.episodes([{**ROWS[0], "environment": "other"}])

    store = TraceStore(tmp_path / "store", embedder=HashingEmbedder(64))
    assert build_from_environment(store, _agent(tiny_model, [GOOD, GOOD], factories), rows, num_samples=1,
                                  keep_top_k=1) == 6
    rewards = {(m["question_id"], m["reward"]) for m in store.collection.get(include=["metadatas"])["metadatas"]}
    assert rewards == {("five", 5.0), ("doubled", 10.0)}


def test_an_environment_factory_that_is_not_callable_is_refused(tiny_model):
    import pytest

    with pytest.raises(TypeError, match=r"environment_factory 'broken' must be a class or a callable.*got int"):
        _agent(tiny_model, [GOOD], {"plain": Counter, "broken": 3})


def test_a_build_run_again_after_a_kill_skips_the_questions_already_stored(tiny_model, tmp_path):
    """A killed ``rapo build-store`` is run again: each question stored before the kill keeps its ``keep_top_k``
    trajectories, not those plus the ones another sampling of it draws."""
    store = TraceStore(tmp_path / "store", embedder=HashingEmbedder(64))
    assert build_from_environment(store, _agent(tiny_model, [GOOD]), ROWS, num_samples=1, keep_top_k=1,
                                  source="agent:x") == 3
    other = [call("add", "Adding three.", n=3), call("add", n=2), "Five in all.<|im_end|>"]  # sampled otherwise
    again, rolled_out = _agent(tiny_model, [other]), []
    episodes = again.episodes
    again.episodes = lambda rows: rolled_out.append(rows) or episodes(rows)
    assert build_from_environment(store, again, ROWS, num_samples=1, keep_top_k=1, source="agent:x") == 0
    assert len({m["trajectory_id"] for m in store.collection.get(include=["metadatas"])["metadatas"]}) == 1
    assert rolled_out == []  # not rolled out again
    # another agent's build is its own: it does not skip this one's questions
    assert build_from_environment(store, again, ROWS, num_samples=1, keep_top_k=1, source="agent:y") == 3


def test_a_rollout_sampled_twice_counts_once_for_keep_top_k(tiny_model, tmp_path):
    """As ``build_from_agent`` keeps the best distinct trajectories: two identical rollouts are one trajectory (the
    same records), so the next best distinct rollout takes the second of ``keep_top_k``'s places."""
    store = TraceStore(tmp_path / "store", embedder=HashingEmbedder(64))
    other = [call("add", "Adding three.", n=3), call("add", n=2), "Five in all.<|im_end|>"]
    agent = _agent(tiny_model, [GOOD, GOOD, other])  # every rollout totals 5: a three-way tie
    assert build_from_environment(store, agent, ROWS, num_samples=3, keep_top_k=2) == 6
    assert len({m["trajectory_id"] for m in store.collection.get(include=["metadatas"])["metadatas"]}) == 2


def test_a_turn_that_wrote_nothing_is_no_stored_step(tiny_model, tmp_path):
    """A rollout whose last turn is only its end of turn (the episode over after a tool result) stores its tool step
    alone: an empty step would be retrieved as an empty block at the very context a rollout asks from after its call."""
    store = TraceStore(tmp_path / "store", embedder=HashingEmbedder(64))
    agent = _agent(tiny_model, [[call("add", n=5), "<|im_end|>"]])
    assert build_from_environment(store, agent, ROWS, num_samples=1, keep_top_k=1) == 1
    (metadata,) = store.collection.get(include=["metadatas"])["metadatas"]
    assert metadata["value"].startswith("<tool_call>") and (metadata["step_index"], metadata["num_steps"]) == (0, 1)
