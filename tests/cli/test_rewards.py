"""TRL's own reward functions on the command line. `trl.rewards.accuracy_reward(completions, solution)`
reads the gold answer as `solution`: it is fed from the answer column; an argument no column provides is refused
before training, naming it."""

from __future__ import annotations

import pytest

from rapo_trl.cli import read_recipe
from rapo_trl.cli.common import training_rows
from rapo_trl.cli.errors import UsageError
from rapo_trl.cli.rewards import reward_names, training_rewards, with_reward_columns


def test_trls_accuracy_reward_gets_solution_from_the_answer_column():
    script, training, _ = read_recipe("train", ["--task", "arithmetic", "--train_size", "2",
                                                "--reward_funcs", "trl.rewards.accuracy_reward"])
    functions, _ = training_rewards(script, training.reward_weights)
    rows = with_reward_columns(training_rows(script, "train", []), dict(zip(reward_names(script), functions)))
    assert rows["solution"] == rows["answer"]
    # as TRL's _calculate_rewards calls it: every column by name
    columns = {key: rows[key] for key in rows.column_names if key != "prompt"}
    completions = [[{"role": "assistant", "content": f"\\boxed{{{answer}}}"}] for answer in rows["answer"]]
    assert functions[0](completions=completions, **columns) == [1.0, 1.0]
    wrong = [[{"role": "assistant", "content": "\\boxed{-1}"}] for _ in rows["answer"]]
    assert functions[0](completions=wrong, **columns) == [0.0, 0.0]


def test_rows_that_have_solution_keep_it_and_other_arguments_are_refused():
    def needs_units(completions, units, **kwargs):
        return [0.0] * len(completions)

    script, _, _ = read_recipe("train", ["--task", "arithmetic", "--train_size", "2"])
    rows = training_rows(script, "train", [])
    assert with_reward_columns(rows, {"rapo_outcome": lambda completions, answer, **kw: []}).column_names \
        == rows.column_names
    with pytest.raises(UsageError, match="reward 'my.needs_units' requires the argument\\(s\\) 'units', which no data "
                                         "column provides"):
        with_reward_columns(rows, {"my.needs_units": needs_units})
