"""The shipped demo tasks: splits, the invented corpus, and the scripted experts' rewards."""

from __future__ import annotations

import hashlib
import json
import random
import re

import pytest

from rapo_trl.rewards import format_check, rapo_outcome_reward, tools_used
from rapo_trl.tasks import TASKS, get_task, load_corpus, load_task
from rapo_trl.tasks.two_hop import lexical_search
from rapo_trl.tasks.world import build_world

N = 150


def rewards(rows, trajectories):
    return rapo_outcome_reward(
        prompts=[r["question"] for r in rows],
        completions=trajectories,
        completion_ids=[[0]] * len(rows),
        answer=[r["answer"] for r in rows],
    )


@pytest.fixture(scope="module", params=sorted(TASKS))
def task_rows(request):
    return request.param, list(load_task(request.param, "train", n=N, seed=0))


def test_expert_scores_the_maximum_reward(task_rows):
    name, rows = task_rows
    trajectories = [get_task(name).expert(row) for row in rows]
    for text in trajectories:
        assert format_check(text) == (True, None), text
    # The most the rules give: F1 1.0, plus the 0.1 bonus where the task needs both tools.
    best = [1.0 + 0.1 * (tools_used(t) == {"python", "search"}) for t in trajectories]
    assert rewards(rows, trajectories) == pytest.approx(best)
    assert set(get_task(name).tools) >= set().union(*map(tools_used, trajectories))


def test_expert_with_error_rate_one_is_wrong_but_well_formed(task_rows):
    name, rows = task_rows
    trajectories = [get_task(name).expert(row, error_rate=1.0) for row in rows]
    assert all(format_check(t)[0] for t in trajectories)
    assert rewards(rows, trajectories) == [0.0] * len(rows)


def test_expert_error_rate_is_a_probability(task_rows):
    name, rows = task_rows
    rng = random.Random(0)
    scores = rewards(rows, [get_task(name).expert(row, error_rate=0.5, rng=rng) for row in rows])
    assert 0.3 < scores.count(0.0) / len(rows) < 0.7


def test_expert_is_deterministic_per_question(task_rows):
    name, rows = task_rows
    expert = get_task(name).expert
    assert [expert(r, error_rate=0.5) for r in rows[:20]] == [expert(r, error_rate=0.5) for r in rows[:20]]


@pytest.mark.parametrize("name", sorted(TASKS))
def test_splits_are_disjoint_and_seeded(name):
    train = load_task(name, "train", n=300, seed=1)
    evals = load_task(name, "eval", n=100, seed=2)
    assert not set(train["question"]) & set(evals["question"])
    assert not set(train["question_id"]) & set(evals["question_id"])
    assert len(set(train["question"])) == 300
    assert load_task(name, "train", n=300, seed=1)["question"] == train["question"]
    assert load_task(name, "train", n=300, seed=3)["question"] != train["question"]


def test_two_hop_split_sizes_and_limits():
    train, evals = load_task("two_hop", "train"), load_task("two_hop", "eval")
    assert len(train) + len(evals) == 600  # 200 companies x 3 question kinds
    with pytest.raises(ValueError, match=f"two_hop has {len(evals)} eval questions"):
        load_task("two_hop", "eval", n=len(evals) + 1)


def test_bad_task_and_split_names():
    with pytest.raises(ValueError, match="unknown task 'nope'; choose one of"):
        load_task("nope")
    with pytest.raises(ValueError, match="split must be one of train, eval"):
        load_task("arithmetic", "test")
    with pytest.raises(ValueError, match="no search corpus"):
        load_corpus("arithmetic")


def test_arithmetic_numbers_are_large():
    row = load_task("arithmetic", "eval", n=1)[0]
    assert max(len(x) for x in row["code"].replace("\n", " ").split() if x.isdigit()) >= 5
    assert row["answer"].lstrip("-").isdigit()


def test_corpus_is_the_shipped_one():
    corpus = load_corpus("two_hop")
    assert corpus.column_names == ["title", "text"]
    assert len(corpus) == 500
    digest = hashlib.sha1(json.dumps(corpus.to_list(), sort_keys=True).encode()).hexdigest()
    # Pinned: a change here changes every stored trace and every eval number on this task.
    assert digest == CORPUS_SHA1


def test_every_two_hop_answer_is_in_the_corpus():
    text = " ".join(load_corpus("two_hop")["text"])
    rows = list(load_task("two_hop", "train")) + list(load_task("two_hop", "eval"))
    assert all(row["answer"][0] in text for row in rows if row["kind"] != "founding_age")


def test_names_are_unique_single_words():
    world = build_world()
    words = [*world.countries, *world.city_country, *(w for p in world.people for w in p.split())]
    assert len(words) == len(set(words))


def test_local_search_finds_the_entity_asked_for():
    world = build_world()
    company = next(iter(world.companies.values()))
    assert lexical_search(f"{company.name} founder").startswith(f"Doc 1 ({company.name}): ")
    assert lexical_search(f"{company.founder} born").startswith(f"Doc 1 ({company.founder}): ")


class EchoTool:
    """A stand-in real tool: the expert must show its output, not the local simulation."""

    timeout = 5.0

    def __init__(self, tag):
        self.tag = tag

    def run(self, text):
        return f"{self.tag} saw {len(text)} chars"


def test_expert_uses_the_real_tools_when_given():
    row = load_task("two_hop", "eval", n=1)[0]
    text = get_task("two_hop").expert(row, tools={"search": EchoTool("search")})
    assert "\n<result>\nsearch saw " in text
    row = load_task("arithmetic", "eval", n=1)[0]
    text = get_task("arithmetic").expert(row, tools={"python": EchoTool("python")})
    assert "\n<result>\npython saw " in text


def test_expert_matches_the_real_python_tool():
    tools = pytest.importorskip("rapo_trl.tools")
    if not hasattr(tools, "PythonTool"):
        pytest.skip("PythonTool not available yet")
    row = load_task("arithmetic", "eval", n=1)[0]
    expert = get_task("arithmetic").expert
    assert expert(row, tools={"python": tools.PythonTool()}) == expert(row)


def test_expert_with_the_real_search_tool_shows_its_exact_output():
    tools = pytest.importorskip("rapo_trl.tools")
    from rapo_trl.embeddings import HashingEmbedder
    from rapo_trl.tasks import RESULT_TEMPLATE

    # A model-free embedder keeps this fast. (With all-MiniLM-L6-v2, the default, every query the
    # experts write ranks the passage it needs first: measured over all 800 of them.)
    search = tools.SearchTool(load_corpus("two_hop"), embedder=HashingEmbedder())
    rows = list(load_task("two_hop", "eval", n=6))
    trajectories = [get_task("two_hop").expert(row, tools={"search": search}) for row in rows]
    assert rewards(rows, trajectories) == pytest.approx(
        [1.0 + 0.1 * (r["kind"] == "founding_age") for r in rows]
    )
    for text in trajectories:
        for query in re.findall(r"<search>(.*?)</search>", text):
            assert f"<search>{query}</search>" + RESULT_TEMPLATE.format(output=search.run(query)) in text


CORPUS_SHA1 = "8a0760974250fd2756aa3936b3c43a1ca10cff37"
