"""The ``word_problems`` task: its templates, the template-level split (nothing of an eval template
reaches training rows or a store built from them), the difficulty knob, the expert and the CLI wiring."""

from __future__ import annotations

import ast
import random
import re
import string
from collections import Counter

import pytest

from rapo_trl.rewards import format_check, rapo_outcome_reward
from rapo_trl.tasks import get_task, load_task, to_rapo_rows
from rapo_trl.tasks import word_problems as wp
from rapo_trl.tasks.story_template import NAMES
from rapo_trl.tasks.trajectory import run_python_locally

SIZES_AND_SEEDS = [(50, 0), (300, 1), (1000, 7)]


def rewards(rows, trajectories):
    return rapo_outcome_reward(
        prompts=[r["question"] for r in rows],
        completions=trajectories,
        completion_ids=[[0]] * len(rows),
        answer=[r["answer"] for r in rows],
    )


def skeleton(question: str) -> str:
    """The story with its numbers and the person's name blanked out."""
    text = re.sub(r"\d+", "#", question)
    return re.sub(r"\b(" + "|".join(NAMES) + r")\b", "@", text)


def literal_fragments(template) -> list[str]:
    """The template's fixed text between placeholders, the longer pieces (>= 25 characters)."""
    pieces = [literal for literal, *_ in string.Formatter().parse(template.story)]
    return [p.strip() for p in pieces if len(p.strip()) >= 25]


# --- templates ---


def test_at_least_36_templates_with_unique_stable_ids():
    ids = [t.id for t in wp._TEMPLATES]
    assert len(ids) >= 36
    assert len(set(ids)) == len(ids) == len(wp.TEMPLATES)
    assert all(re.fullmatch(r"wp\d\d", i) for i in ids)
    assert len({t.story for t in wp._TEMPLATES}) == len(ids)  # each its own wording


def test_every_story_samples_an_integer_answer_from_its_code():
    for template in wp.ALL_STORIES.values():
        placeholders = {field for _, field, *_ in string.Formatter().parse(template.story) if field}
        # Every quantity appears in the story, every number used is one of them.
        assert placeholders - {"name"} == set(template.variables), template.id
        names = {n.id for n in ast.walk(ast.parse(template.expression)) if isinstance(n, ast.Name)}
        assert names == set(template.variables), template.id
        rng = random.Random(template.id)
        for digits in (0, 1, 2):
            for _ in range(100):
                question, code = template.sample(rng, digits)
                printed = run_python_locally(code).strip()
                assert re.fullmatch(r"\d+", printed) and int(printed) > 0, (template.id, code, printed)
                values = {}
                exec(code.rsplit("\n", 1)[0], {}, values)  # noqa: S102 - our own generated code
                assert all(v > 0 and str(v) in question for v in values.values()), (template.id, question)
                if template.exact:  # "shared equally": true division gives the same whole number
                    assert eval(template.expression.replace("//", "/"), {}, values) == int(printed)  # noqa: S307


def test_wordings_vary_in_number_order_and_question_form():
    reordered, other_questions, question_first = 0, 0, 0
    for template in wp._TEMPLATES:
        in_story = [f for _, f, *_ in string.Formatter().parse(template.story) if f and f != "name"]
        in_expression = list(dict.fromkeys(re.findall(r"[a-z_]+", template.expression)))
        reordered += in_story != in_expression
        sentences = re.split(r"(?<=[.?!]) ", template.story)
        other_questions += not sentences[-1].startswith("How many")
        question_first += sentences[0].endswith("?")
    assert reordered >= 15  # the numbers are not simply used in the order they are read
    assert other_questions >= 12
    assert question_first >= 1


def test_numbers_are_too_large_for_mental_arithmetic():
    rows = load_task("word_problems", "train", n=200)
    largest = []
    for row in rows:
        numbers = [int(x) for x in re.findall(r"\d+", row["question"])]
        assert max(numbers) >= 100 and sum(n >= 10 for n in numbers) >= 3, row["question"]
        largest.append(max(numbers))
    assert sum(n >= 10_000 for n in largest) > 0.5 * len(rows)


def test_operation_mixes_cover_2_to_4_ops_division_and_parentheses():
    templates = list(wp.TEMPLATES.values())
    for template in templates:  # ops counts what the expression really does
        tree = ast.parse(template.expression, mode="eval")
        assert template.ops == sum(isinstance(n, ast.BinOp) for n in ast.walk(tree))
        assert template.operators <= {"+", "-", "*", "//"}
        assert "/" not in template.expression.replace("//", "")
    assert {t.ops for t in templates} == {2, 3, 4}
    assert Counter(t.ops for t in templates)[4] >= 8
    assert sum("//" in t.operators for t in templates) >= 10
    assert sum("(" in t.expression for t in templates) >= 10
    assert any(t.exact for t in templates) and any("//" in t.operators and not t.exact for t in templates)


# --- the template-level split ---


def test_eval_templates_are_a_disjoint_explicit_tuple_covering_the_training_mixes():
    assert isinstance(wp.EVAL_TEMPLATES, tuple) and 10 <= len(wp.EVAL_TEMPLATES) <= 12
    assert set(wp.EVAL_TEMPLATES) <= set(wp.TEMPLATES)
    assert not set(wp.EVAL_TEMPLATES) & set(wp.TRAIN_TEMPLATES)
    assert set(wp.EVAL_TEMPLATES) | set(wp.TRAIN_TEMPLATES) == set(wp.TEMPLATES)
    train_mixes = {(wp.TEMPLATES[i].ops, wp.TEMPLATES[i].operators) for i in wp.TRAIN_TEMPLATES}
    for i in wp.EVAL_TEMPLATES:  # held-out wordings, not held-out operators
        assert (wp.TEMPLATES[i].ops, wp.TEMPLATES[i].operators) in train_mixes, i
    assert {wp.TEMPLATES[i].ops for i in wp.EVAL_TEMPLATES} == {2, 3, 4}
    assert any("(" in wp.TEMPLATES[i].expression for i in wp.EVAL_TEMPLATES)


@pytest.mark.parametrize("n, seed", SIZES_AND_SEEDS)
def test_no_eval_template_reaches_training_rows(n, seed):
    train = load_task("word_problems", "train", n=n, seed=seed)
    evals = load_task("word_problems", "eval", n=200, seed=seed)
    assert set(train["template"]) <= set(wp.TRAIN_TEMPLATES)
    assert set(evals["template"]) == set(wp.EVAL_TEMPLATES)
    assert not set(train["question"]) & set(evals["question"])
    assert not set(train["question_id"]) & set(evals["question_id"])
    # Not even the story skeleton, nor any long fixed phrase of an eval template, shows up in training.
    assert not {skeleton(q) for q in train["question"]} & {skeleton(q) for q in evals["question"]}
    fragments = [f for i in wp.EVAL_TEMPLATES for f in literal_fragments(wp.TEMPLATES[i])]
    assert len(fragments) >= len(wp.EVAL_TEMPLATES)
    joined = "\n".join(train["question"])
    assert not [f for f in fragments if f in joined]


def test_skeletons_identify_templates():
    # The skeleton check above has teeth: each template yields one skeleton, distinct from the others'.
    rows = load_task("word_problems", "eval", n=300, seed=3)
    by_template = {}
    for question, template in zip(rows["question"], rows["template"]):
        by_template.setdefault(template, set()).add(skeleton(question))
    assert all(len(s) == 1 for s in by_template.values())
    assert len(set().union(*by_template.values())) == len(wp.EVAL_TEMPLATES)


def test_rows_are_deterministic_content_hashed_and_unique():
    rows = load_task("word_problems", "train", n=300, seed=4)
    assert rows.column_names == ["question", "answer", "question_id", "code", "template", "ops", "shape"]
    assert load_task("word_problems", "train", n=300, seed=4).to_list() == rows.to_list()
    assert load_task("word_problems", "train", n=300, seed=5)["question"] != rows["question"]
    assert len(set(rows["question"])) == 300
    assert all(r["question_id"] == f"word_problems-{wp.stable_hash(r['question'])}" for r in rows)
    assert all(run_python_locally(r["code"]).strip() == r["answer"] for r in rows)
    assert len(load_task("word_problems", "eval")) == wp.DEFAULT_SIZES["eval"]


# --- knobs ---


def test_difficulty_shapes_the_training_operation_counts():
    by_difficulty = {d: Counter(load_task("word_problems", "train", n=400, difficulty=d)["ops"]) for d in (1, 2, 3)}
    assert set(by_difficulty[1]) == {2}
    assert set(by_difficulty[2]) == {2, 3}
    assert set(by_difficulty[3]) == {2, 3, 4}
    assert Counter(load_task("word_problems", "train", n=400)["ops"]) == by_difficulty[3]  # the default is all
    # Eval ignores the training knob unless it is asked for explicitly.
    assert set(load_task("word_problems", "eval", n=200)["ops"]) == {2, 3, 4}
    assert set(load_task("word_problems", "eval", n=50, difficulty=1)["template"]) <= {
        i for i in wp.EVAL_TEMPLATES if wp.TEMPLATES[i].ops == 2
    }


def test_digits_widen_the_large_quantities():
    def longest(digits):
        rows = load_task("word_problems", "train", n=300, seed=2, digits=digits)
        return [max(map(len, re.findall(r"\d+", q))) for q in rows["question"]]

    plain, wider = longest(0), longest(2)
    assert min(wider) >= 5 and min(plain) >= 3
    assert 1.7 < sum(wider) / 300 - sum(plain) / 300 < 2.3


def test_bad_knobs_fail_with_one_clear_error():
    with pytest.raises(ValueError, match="difficulty must be one of 1, 2, 3, got 4"):
        load_task("word_problems", difficulty=4)
    with pytest.raises(ValueError, match="digits must be an integer from 0 to 2"):
        load_task("word_problems", digits=-1)
    with pytest.raises(ValueError, match="split must be one of train, eval, heldout_shapes, demonstrated"):
        load_task("word_problems", "test")
    with pytest.raises(ValueError, match="task 'arithmetic' has no option difficulty"):
        load_task("arithmetic", difficulty=1)


# --- the expert, the store built from training rows ---


def test_expert_scores_1_and_its_slips_score_below_1():
    rows = list(load_task("word_problems", "train", n=120, seed=0))
    good = [wp.expert(row) for row in rows]
    assert all(format_check(t) == (True, None) for t in good)
    assert all(t.count("<python>") == 1 and "\\boxed{" in t for t in good)
    assert rewards(rows, good) == [1.0] * len(rows)
    slipped = [wp.expert(row, error_rate=1.0) for row in rows]
    assert all(format_check(t)[0] for t in slipped)
    assert max(rewards(rows, slipped)) < 1.0
    # The slipped program still names every quantity and is printed by the same kind of call.
    assert all(re.search(r"<python>\n(\w+ = \d+\n)+print\(", t) for t in slipped)


def test_expert_error_rate_is_a_probability():
    rows = list(load_task("word_problems", "eval", n=200, seed=0))
    rng = random.Random(0)
    scores = rewards(rows, [wp.expert(row, error_rate=0.3, rng=rng) for row in rows])
    assert 0.15 < scores.count(0.0) / len(rows) < 0.45


def test_a_store_built_from_training_rows_holds_no_eval_template(tmp_path):
    from rapo_trl.embeddings import HashingEmbedder
    from rapo_trl.store import StoreConfig, TraceStore

    train = to_rapo_rows(load_task("word_problems", "train", n=60, seed=0), tools=[])
    evals = load_task("word_problems", "eval", n=200, seed=0)
    store = TraceStore(
        tmp_path / "store", embedder=HashingEmbedder(), config=StoreConfig(show_progress=False)
    )
    by_id = {row["question_id"]: row for row in train}
    rng = random.Random(0)
    by_prompt = {str(row["prompt"]): row for row in train}

    def agent(prompt):
        return get_task("word_problems").expert(by_prompt[str(prompt)], error_rate=0.25, rng=rng)

    added = store.build_from_agent(agent, train, rapo_outcome_reward, num_samples=2, keep_top_k=2)
    assert added > 0
    records = store.to_dataset(include_embeddings=False)
    assert set(records["question_id"]) <= set(by_id)
    text = "\n".join(str(value) for column in records.column_names for value in records[column])
    assert sum(row["question"] in text for row in train) > 0  # the check below can see questions
    assert not [q for q in evals["question"] if q in text]
    assert not {skeleton(q) for q in evals["question"]} & {skeleton(by_id[i]["question"]) for i in records["question_id"]}
    fragments = [f for i in wp.EVAL_TEMPLATES for f in literal_fragments(wp.TEMPLATES[i])]
    assert not [f for f in fragments if f in text]
    # Nor the eval templates' programs, which the store does hold for the training templates.
    assert any(f"print({wp.TEMPLATES[t].expression})" in text for t in wp.TRAIN_TEMPLATES)
    assert not [t for t in wp.EVAL_TEMPLATES if f"print({wp.TEMPLATES[t].expression})" in text]

    # The warm start's SFT examples are the store's best trajectories for the training questions.
    from rapo_trl.cli.warm_start import trajectories_from_store

    warm = trajectories_from_store(store, min_reward=1.0)
    assert warm and set(warm) <= set(by_id) and not set(warm) & set(evals["question_id"])
    assert all(by_id[qid]["answer"] in trajectory for qid, trajectory in warm.items())


# --- the rapo CLI ---


def _script(tmp_path, **overrides):
    import yaml

    from rapo_trl.cli import parse_recipe

    config = {"task": "word_problems", "train_size": 40, "eval_size": 24, "output_dir": str(tmp_path / "out"),
              "use_cpu": True, **overrides}
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(config))
    return parse_recipe("build-store", ["--config", str(path)])[0]


def test_cli_accepts_the_task_and_its_difficulty(tmp_path):
    from rapo_trl.cli.build_store import _expert_agent
    from rapo_trl.cli.common import load_questions, tool_names

    script = _script(tmp_path, task_difficulty=1)
    assert script.task_difficulty == 1
    train, evals = load_questions(script, "train"), load_questions(script, "eval")
    assert len(train) == 40 and set(train["ops"]) == {2}
    assert len(evals) == 24 and set(evals["template"]) <= set(wp.EVAL_TEMPLATES) and max(evals["ops"]) > 2
    assert tool_names(script) == ["python"]
    rows = to_rapo_rows(train, tools=[])
    trajectory = _expert_agent(script, rows, [])(rows[0]["prompt"])
    assert format_check(trajectory) == (True, None)


def test_cli_eval_difficulty_picks_held_out_templates_only(tmp_path):
    from rapo_trl.cli.common import load_questions

    script = _script(tmp_path, eval_difficulty=1)
    evals, train = load_questions(script, "eval"), load_questions(script, "train")
    assert set(evals["ops"]) == {2} and set(evals["template"]) <= set(wp.EVAL_TEMPLATES)
    assert max(train["ops"]) > 2  # the eval knob leaves the training distribution alone
    assert not set(evals["question"]) & set(train["question"])


def test_cli_evaluates_fresh_reward_only_questions_and_never_trains_on_them(tmp_path):
    from rapo_trl.cli.common import UsageError, eval_splits, load_questions

    script = _script(tmp_path, task_difficulty=1, eval_difficulty=1, demo_split="demonstrated",
                     train_split="reward_only", eval_splits=["reward_only_fresh", "heldout_stories"], eval_size=64)
    assert eval_splits(script) == ["reward_only_fresh", "heldout_stories"]
    fresh, train = load_questions(script, "reward_only_fresh"), load_questions(script, "train")
    stories = set(wp.STORY_ROLES["reward_only"])  # RL's own stories
    assert len(fresh) == 64 and set(fresh["template"]) <= stories and set(train["template"]) <= stories
    assert not set(fresh["question"]) & set(train["question"])
    with pytest.raises(UsageError, match="'reward_only_fresh' cannot be a training split"):
        load_questions(_script(tmp_path, train_split="reward_only_fresh"), "train")
    with pytest.raises(UsageError, match="'reward_only' cannot be an eval set"):
        load_questions(script, "reward_only")


def test_cli_refuses_a_difficulty_it_cannot_use(tmp_path):
    from rapo_trl.cli.common import UsageError, load_questions

    with pytest.raises(UsageError, match="task_difficulty applies to task=word_problems only"):
        load_questions(_script(tmp_path, task="arithmetic", task_difficulty=2), "train")
    with pytest.raises(UsageError, match="eval_difficulty applies to task=word_problems only"):
        load_questions(_script(tmp_path, task="arithmetic", eval_difficulty=2), "eval")
    with pytest.raises(UsageError, match="difficulty must be one of 1, 2, 3, got 9"):
        load_questions(_script(tmp_path, task_difficulty=9), "train")


def test_expert_matches_the_real_python_tool():
    from rapo_trl.tools import PythonTool

    tool = PythonTool()
    for row in load_task("word_problems", "eval", n=3, seed=0):
        assert wp.expert(row, tools={"python": tool}) == wp.expert(row)
