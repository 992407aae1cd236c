"""Stored steps end where the trainer retrieves: after a call of any tool the run uses, a tool of yours included.
The store records the tags it cut at; building from a dataset or an agent takes them; a trainer whose tools the
store was not cut at says so before training."""

from __future__ import annotations

import logging

from datasets import Dataset

from rapo_trl.store import TraceStore, split_steps
from rapo_trl.tasks import question_id_of, to_rapo_rows
from rapo_trl.trainer.checks import warn_if_store_cut_elsewhere

QUESTION = "Five pens cost 12.5. What does one cost?"
TRAJECTORY = ("<think>Divide.</think>\n<unit_price>{\"total\": 12.5, \"count\": 5}</unit_price>\n<result>\n2.5\n"
              "</result>\n<think>Check it.</think>\n<python>print(2.5 * 5)</python>\n<result>\n12.5\n</result>\n"
              "<answer>\\boxed{2.5}</answer>")


def test_a_step_ends_at_a_call_of_any_tool_the_run_uses():
    assert len(split_steps(TRAJECTORY)) == 2  # the built-in tags alone: the unit_price call is inside step one
    steps = split_steps(TRAJECTORY, ("python", "unit_price"))
    assert [step.strip().splitlines()[-1] for step in steps] == ["</result>", "</result>", "<answer>\\boxed{2.5}</answer>"]
    assert "".join(steps) == TRAJECTORY


def _mine():
    return Dataset.from_list([{"trajectory": TRAJECTORY, "reward": 1.0, "question": QUESTION,
                               "question_id": question_id_of(QUESTION)}])


def test_a_store_built_with_tool_tags_records_them_and_cuts_later_writes_there(make_store, tmp_path, embedder):
    store = make_store()
    assert store.tool_tags == ("python", "search")
    assert store.add_from_dataset(_mine()) == 2
    other = make_store("other")
    assert other.add_from_dataset(_mine(), tool_tags=["python", "unit_price"]) == 3
    assert other.tool_tags == ("python", "search", "unit_price")
    other.close()
    reopened = TraceStore(tmp_path / "other", embedder=embedder)
    assert reopened.tool_tags == ("python", "search", "unit_price")  # recorded in the collection
    # a later write (store growth, a trajectory without tool_tags) is cut where the store's steps are
    assert reopened.add_trajectories([TRAJECTORY.replace("12.5", "10")], [1.0], ["q2"], prompts=[QUESTION]) == 3


class _ScriptedAgent:
    """An off-policy agent that always writes the trajectory above, with the tools it calls named."""

    tool_tags = ["python", "unit_price"]

    def __call__(self, prompt):
        return TRAJECTORY


def test_building_from_an_agent_cuts_at_the_agents_tools(make_store):
    store = make_store()
    rows = to_rapo_rows(Dataset.from_list([{"question": QUESTION, "answer": "2.5"}]), tools=[])
    added = store.build_from_agent(_ScriptedAgent(), rows, lambda completions, **kw: [1.0] * len(completions),
                                   num_samples=1, keep_top_k=1)
    assert added == 3 and "unit_price" in store.tool_tags
    assert store.to_dataset(include_embeddings=False)["question_id"] == [question_id_of(QUESTION)] * 3


def test_a_trainer_whose_tools_the_store_was_not_cut_at_is_told(make_store, caplog):
    store = make_store()
    store.add_from_dataset(_mine())
    with caplog.at_level(logging.WARNING, logger="rapo_trl.trainer"):
        warn_if_store_cut_elsewhere(store, ["python", "unit_price"])
        warn_if_store_cut_elsewhere(store, ["python"])  # cut at every tool this trainer runs: nothing to say
    (message,) = [r.getMessage() for r in caplog.records]
    assert "steps were cut at </python>, </search> only, so a stored step can run past a <unit_price> call" in message
    assert "add_from_dataset(..., tool_tags=['python', 'unit_price'])" in message


def test_a_store_whose_question_ids_match_no_training_row_is_reported(make_store, caplog):
    from rapo_trl.config import RAPOConfig
    from rapo_trl.trainer.checks import warn_if_nothing_to_retrieve

    args = RAPOConfig("unused", retrieve_own_question=True, report_to="none", use_cpu=True)
    rows = to_rapo_rows(Dataset.from_list([{"question": QUESTION, "answer": "2.5"}]), tools=[])
    store = make_store()
    store.add_from_dataset(_mine().map(lambda row: {"question_id": "crates"}))  # a name, not the row's id
    with caplog.at_level(logging.WARNING, logger="rapo_trl.trainer"):
        warn_if_nothing_to_retrieve(args, store, rows)
    assert any("no question_id of the trace store is a training row's" in r.getMessage() for r in caplog.records)
    caplog.clear()
    matching = make_store("matching")
    matching.add_from_dataset(_mine())  # stored under question_id_of(QUESTION), the row's id
    with caplog.at_level(logging.WARNING, logger="rapo_trl.trainer"):
        warn_if_nothing_to_retrieve(args, matching, rows)
    assert not caplog.records


def test_a_store_with_no_record_above_its_min_reward_is_reported(make_store, trajectory, caplog):
    from rapo_trl.config import RAPOConfig
    from rapo_trl.trainer.checks import warn_if_nothing_to_retrieve

    args = RAPOConfig("unused", retrieve_own_question=False, report_to="none", use_cpu=True)
    for name, rewards, warned in (("low", [0.0, -1.0], True), ("good", [0.0, 0.5], False)):
        store = make_store(name)  # min_reward 0.0, the default: only records above it are retrieved
        store.add_trajectories([trajectory("1"), trajectory("2")], rewards, ["q1", "q2"], prompts=["a?", "b?"])
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="rapo_trl.trainer"):
            warn_if_nothing_to_retrieve(args, store, tool_tags=["python"])
        found = [r.getMessage() for r in caplog.records if "min_reward" in r.getMessage()]
        assert len(found) == warned, (name, found)
        if warned:
            assert "at or below its min_reward (0.0; the best is 0.0)" in found[0]
        assert store.best_reward() == max(rewards)


def test_a_fresh_store_grown_by_a_trainer_with_a_function_tool_cuts_at_its_calls(make_store):
    from rapo_trl.rollout import RolloutRow
    from rapo_trl.trainer.store_growth import grow_store

    class Decoded:  # the row's completion ids stand for the trajectory's text
        def decode(self, ids, skip_special_tokens=True):
            return TRAJECTORY

    row = RolloutRow([1], completion_ids=[10, 11, 12])
    inputs = [{"prompt": [{"role": "user", "content": QUESTION}], "question_id": "q"}]
    plain, grown = make_store("plain"), make_store("grown")
    grow_store(plain, inputs, [row], [(0, 1.0)], Decoded())
    grow_store(grown, inputs, [row], [(0, 1.0)], Decoded(), tool_tags=["python", "unit_price"])
    assert len(plain) == 2  # the built-in tags alone: the unit_price call hides inside the first step
    assert len(grown) == 3 and grown.tool_tags == ("python", "search", "unit_price")


def test_records_imported_into_a_store_cut_at_more_tools_are_reported(make_store, trajectory, embedder, caplog):
    # The records arrive cut at the source's tools: in a store that says it cuts at calc too, a step of theirs can
    # run past a calc call, and a trainer running calc would be told nothing.
    from rapo_trl.store.dataset_io import add_records_from_dataset

    source = make_store("source")
    source.add_trajectories([trajectory("1")], [1.0], ["q1"], prompts=["What is 12*7?"])
    target = make_store("target")
    target.add_trajectories([trajectory("2")], [1.0], ["q2"], prompts=["What is 6*7?"], tool_tags=["calc"])
    with caplog.at_level("WARNING", logger="rapo_trl.store.dataset_io"):
        add_records_from_dataset(target, source.to_dataset())
    assert "calc" in caplog.text and len(target) == 4
    caplog.clear()
    with caplog.at_level("WARNING", logger="rapo_trl.store.dataset_io"):
        add_records_from_dataset(source, target.to_dataset())  # cut at more tools than the store: nothing to say
    assert caplog.text == "" and source.tool_tags == ("python", "search", "calc")
