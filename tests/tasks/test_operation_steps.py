"""``word_problems``' ``tool_steps`` option: the per-operation expert makes one ``<python>`` call per
operation, each later call stating what an earlier call printed; the questions, answers and the one-call expert stay
what they were."""

from __future__ import annotations

import hashlib
import random
import re

import pytest

from rapo_trl.rewards import format_check, rapo_outcome_reward
from rapo_trl.store.steps import split_steps
from rapo_trl.tasks import load_task, to_rapo_rows
from rapo_trl.tasks import word_problems as wp
from rapo_trl.tasks.operation_steps import operation_program, split_program
from rapo_trl.tasks.trajectory import run_python_locally

_CALL = re.compile(r"<python>\n(.*?)\n</python>\n<result>\n(.*?)\n</result>", re.S)


def calls(trajectory: str) -> list[tuple[str, str]]:
    """``(code, printed value)`` of each ``<python>`` call of a trajectory."""
    return [(code, output.strip()) for code, output in _CALL.findall(trajectory)]


def per_operation(split="train", n=60, seed=0, difficulty=3):
    return list(load_task("word_problems", split, n=n, seed=seed, difficulty=difficulty, tool_steps="per_operation"))


def rewards(rows, trajectories):
    return rapo_outcome_reward(prompts=[r["question"] for r in rows], completions=trajectories,
                               completion_ids=[[0]] * len(rows), answer=[r["answer"] for r in rows])


# --- the default stays what it was ---

# Computed with the code before the option existed (commit 7e1d5ad): 24 reward_only rows (difficulty 3, seed 5), each
# solved twice at error rate 0.5, with the default generator and with random.Random(i).
ONE_CALL_DIGEST = "e87aecb9c95599393821781ec1cb87673854b37a0c54bdda2ce83d204735e325"
ROWS_DIGEST = "b592c47f05f2863b9cabe2efa80ea6ac2b34cfb78ec082016be23f58fee10221"
FIRST_ONE_CALL_TRAJECTORY = (
    "<think>I need to work out which quantities combine in which order; Python will do the arithmetic.</think>\n"
    "<python>\nhotels = 12\nfloors = 15\ntowels = 345960\nprint(towels // hotels // floors)\n</python>\n"
    "<result>\n1922\n\n</result>\n<think>The program printed 1922, which answers the question.</think>\n"
    "<answer>\\boxed{1922}</answer>"
)


@pytest.mark.parametrize("options", [{}, {"tool_steps": "one"}])
def test_one_call_rows_and_trajectories_are_byte_identical_to_before_the_option(options):
    rows = load_task("word_problems", "reward_only", n=24, seed=5, difficulty=3, **options)
    assert hashlib.sha256(repr(rows.to_list()).encode()).hexdigest() == ROWS_DIGEST
    texts = [wp.expert(dict(r), error_rate=0.5) for r in rows]
    texts += [wp.expert(dict(r), error_rate=0.5, rng=random.Random(i)) for i, r in enumerate(rows)]
    assert texts[0] == FIRST_ONE_CALL_TRAJECTORY
    assert hashlib.sha256("\x1e".join(texts).encode()).hexdigest() == ONE_CALL_DIGEST


@pytest.mark.parametrize("difficulty", [1, 3])
def test_every_split_asks_the_same_questions_either_way(difficulty):
    for split in wp.SPLITS:
        one = load_task("word_problems", split, n=80, seed=3, difficulty=difficulty).to_list()
        steps = load_task("word_problems", split, n=80, seed=3, difficulty=difficulty, tool_steps="per_operation")
        assert set(steps["tool_steps"]) == {"per_operation"}
        assert [{k: v for k, v in row.items() if k != "tool_steps"} for row in steps.to_list()] == one, split


def test_an_unknown_setting_is_refused():
    with pytest.raises(ValueError, match="tool_steps must be one of one, per_operation, got 'two'"):
        load_task("word_problems", "train", n=2, tool_steps="two")
    with pytest.raises(ValueError, match="has no option tool_steps"):
        load_task("arithmetic", "train", n=2, tool_steps="per_operation")


# --- the per-operation expert ---


def test_a_program_splits_in_python_evaluation_order():
    quantities, operations = split_program("a = 3\nb = 4\nc = 5\nd = 6\nprint((a + b) * (c - d) // 2)")
    assert quantities == {"a": "3", "b": "4", "c": "5", "d": "6"}
    assert [(o.name, o.text) for o in operations] == [
        ("step_1", "a + b"), ("step_2", "c - d"), ("step_3", "step_1 * step_2"), ("step_4", "step_3 // 2")]
    assert operation_program(operations[2], {**quantities, "step_1": "7", "step_2": "-1"}) == (
        "step_1 = 7\nstep_2 = -1\nprint(step_1 * step_2)")
    assert operation_program(operations[3], {"step_3": "-7"}) == "step_3 = -7\nprint(step_3 // 2)"


def test_one_call_per_operation_each_reading_what_an_earlier_call_printed():
    rows = per_operation()
    assert {row["ops"] for row in rows} == {2, 3, 4}
    for row in rows:
        trajectory = wp.expert(row)
        made = calls(trajectory)
        assert len(made) == row["ops"] == trajectory.count("<python>")
        assert made[-1][1] == row["answer"] and f"\\boxed{{{row['answer']}}}" in trajectory
        for code, printed in made:
            assert run_python_locally(code).strip() == printed
            assert code.count("print(") == 1 and len(re.findall(r" (?:\+|-|\*|//) ", code)) == 1  # one operation
        # Each intermediate result is stated, as the literal it printed, by exactly one later call; the last call
        # always reads one (the sandbox keeps nothing between calls).
        for index, (_, printed) in enumerate(made[:-1]):
            readers = [code for code, _ in made[index + 1:] if f"step_{index + 1} = {printed}\n" in code]
            assert len(readers) == 1, trajectory
        assert "step_" in made[-1][0]
        steps = split_steps(trajectory)
        assert len(steps) == row["ops"] + 1
        assert ["\\boxed{" in step for step in steps] == [False] * row["ops"] + [True]
        assert format_check(trajectory) == (True, None)
    assert rewards(rows, [wp.expert(row) for row in rows]) == [1.0] * len(rows)


def test_every_call_runs_in_the_real_sandbox_as_written():
    from rapo_trl.tools import PythonTool

    tool = PythonTool()
    rows = {row["ops"]: row for row in per_operation()}  # one row of each operation count
    for row in rows.values():
        trajectory = wp.expert(row, tools={"python": tool})
        assert trajectory == wp.expert(row)
        made = calls(trajectory)
        assert [tool.run(code).strip() for code, _ in made] == [printed for _, printed in made]
        assert made[-1][1] == row["answer"]


class _OffByOneFirstCall:
    """A python tool whose first call prints one more than the code does."""

    tag, timeout = "python", 10.0

    def __init__(self):
        self.calls = 0

    def run(self, code: str) -> str:
        self.calls += 1
        value = int(run_python_locally(code))
        return f"{value + 1 if self.calls == 1 else value}\n"


def test_a_later_call_uses_the_printed_value_not_a_recomputed_one():
    # A two-operation row whose last operation is not //, so one more in step 1 always changes the answer.
    row = next(r for r in per_operation() if r["ops"] == 2 and split_program(r["code"])[1][-1].operator != "//")
    quantities, operations = split_program(row["code"])
    true_first = int(run_python_locally(operation_program(operations[0], quantities)))
    trajectory = wp.expert(row, tools={"python": _OffByOneFirstCall()})
    (_, first), (second_code, last) = calls(trajectory)
    assert int(first) == true_first + 1 and f"step_1 = {first}\n" in second_code
    assert last != row["answer"] and f"\\boxed{{{last}}}" in trajectory


def test_slips_propagate_to_the_answer_at_the_error_rate():
    rows = per_operation(n=120)
    slipped = [wp.expert(row, error_rate=1.0) for row in rows]
    assert all(format_check(t)[0] for t in slipped)
    assert max(rewards(rows, slipped)) < 1.0
    assert all(len(calls(t)) >= 2 for t in slipped)
    evals = per_operation("eval", n=200)
    rng = random.Random(0)
    scores = rewards(evals, [wp.expert(row, error_rate=0.3, rng=rng) for row in evals])
    assert 0.15 < scores.count(0.0) / len(evals) < 0.45
    # The slip is drawn as the one-call expert draws it: the same question slips to the same wrong answer.
    one = [{k: v for k, v in row.items() if k != "tool_steps"} for row in rows]
    boxed = re.compile(r"\\boxed\{(.*?)\}")
    assert [boxed.findall(t) for t in slipped] == [boxed.findall(wp.expert(row, error_rate=1.0)) for row in one]


def test_a_per_operation_store_holds_only_its_split_and_every_step_but_the_last_is_a_tool_step(tmp_path):
    from rapo_trl.cli.warm_start import trajectories_from_store
    from rapo_trl.embeddings import HashingEmbedder
    from rapo_trl.store import StoreConfig, TraceStore

    demonstrated = to_rapo_rows(load_task("word_problems", "demonstrated", n=40, seed=0, difficulty=1,
                                          tool_steps="per_operation"), tools=[])
    store = TraceStore(tmp_path / "store", embedder=HashingEmbedder(), config=StoreConfig(show_progress=False))
    by_prompt = {str(row["prompt"]): row for row in demonstrated}
    rng = random.Random(0)
    store.build_from_agent(lambda p: wp.expert(by_prompt[str(p)], error_rate=0.25, rng=rng), demonstrated,
                           rapo_outcome_reward, num_samples=2, keep_top_k=2)
    records = store.to_dataset(include_embeddings=False).to_list()
    assert {r["question_id"] for r in records} <= set(demonstrated["question_id"])
    assert {r["num_steps"] for r in records} == {3}
    assert all(("\\boxed{" in r["value"]) == (r["step_index"] == 2) for r in records)
    held_out = {q for split in wp.EVAL_SPLITS
                for q in load_task("word_problems", split, n=150, seed=0, difficulty=1)["question"]}
    text = "\n".join(r["key"] + r["value"] for r in records)
    assert not [q for q in held_out if q in text]
    warm = trajectories_from_store(store, min_reward=1.0)
    assert warm and set(warm) <= set(demonstrated["question_id"])
    assert all(t.count("<python>") == 2 for t in warm.values())


def test_the_recipe_field_reaches_the_store_rows_and_not_the_eval_rows(tmp_path):
    import yaml

    from rapo_trl.cli import parse_recipe
    from rapo_trl.cli.build_store import _expert_agent
    from rapo_trl.cli.common import UsageError, load_questions

    def script(**overrides):
        config = {"task": "word_problems", "train_size": 8, "eval_size": 8, "task_difficulty": 1,
                  "output_dir": str(tmp_path / "out"), "use_cpu": True, **overrides}
        path = tmp_path / "recipe.yaml"
        path.write_text(yaml.safe_dump(config))
        return parse_recipe("build-store", ["--config", str(path)])[0]

    stepwise = script(task_tool_steps="per_operation")
    train, evals = load_questions(stepwise, "train"), load_questions(stepwise, "eval")
    assert set(train["tool_steps"]) == {"per_operation"} and "tool_steps" not in evals.column_names
    assert train["question"] == load_questions(script(), "train")["question"]
    rows = to_rapo_rows(train, tools=[])
    assert _expert_agent(stepwise, rows, [])(rows[0]["prompt"]).count("<python>") == 2
    with pytest.raises(UsageError, match="task_tool_steps applies to task=word_problems only"):
        load_questions(script(task="arithmetic", task_difficulty=None, task_tool_steps="per_operation"), "train")
    with pytest.raises(UsageError, match="tool_steps must be one of one, per_operation, got 'two'"):
        load_questions(script(task_tool_steps="two"), "train")
