"""Stories of the training programs split by story: demonstrated, reward-only, held out.

Nothing of a held-out story (its wording, its skeleton, its answers) reaches training rows, a store built
from the demonstrated stories or the warm start made from that store; reward-only stories reach RL only.
"""

from __future__ import annotations

import random
import string
from collections import Counter

import pytest

from rapo_trl.cli.warm_start import trajectories_from_store
from rapo_trl.rewards import rapo_outcome_reward
from rapo_trl.tasks import load_task, to_rapo_rows
from rapo_trl.tasks import word_problems as wp
from rapo_trl.tasks.splits import split_of
from rapo_trl.tasks.story_template import shape_of
from tests.tasks.test_word_problems import skeleton

ROLES = ("demonstrated", "reward_only", "heldout_stories")


def fragments(story_id: str) -> list[str]:
    """A story's fixed text between placeholders, the longer pieces (>= 20 characters)."""
    pieces = [literal for literal, *_ in string.Formatter().parse(wp.ALL_STORIES[story_id].story)]
    return [p.strip() for p in pieces if len(p.strip()) >= 20]


def test_shape_ignores_names_and_the_order_of_commutative_operands():
    assert shape_of("packs * per_pack + donated") == shape_of("balance + deposit * months")
    assert shape_of("a + b + c") == shape_of("c + (b + a)")
    assert shape_of("a - b * c") != shape_of("b * c - a")  # subtraction is not commutative
    assert shape_of("(a + b) // c") != shape_of("(a + b) * c")


def test_every_training_shape_has_three_more_stories_in_its_own_words():
    for template_id in wp.TRAIN_TEMPLATES:
        template = wp.TEMPLATES[template_id]
        stories = [s for s in wp.STORIES.values() if s.shape_of_template == template_id]
        if template.ops > 3:
            assert not stories
            continue
        assert len(stories) >= 3, template_id
        for story in stories:
            assert story.shape == template.shape, story.id
            assert not set(story.variables) & set(template.variables), story.id  # new names, not a copy
    texts = [s.story for s in wp.ALL_STORIES.values()]
    assert len(set(texts)) == len(texts)
    assert {s.shape_of_template for s in wp.STORIES.values()} <= set(wp.TRAIN_TEMPLATES)


def test_roles_are_disjoint_cover_every_story_and_every_held_out_shape_is_trained():
    roles = {role: set(wp.STORY_ROLES[role]) for role in ROLES}
    assert not roles["demonstrated"] & roles["reward_only"]
    assert not roles["demonstrated"] & roles["heldout_stories"]
    assert not roles["reward_only"] & roles["heldout_stories"]
    assert set().union(*roles.values()) == set(wp.TRAIN_TEMPLATES) | set(wp.STORIES)
    shapes = {role: {wp.shape_id(s) for s in ids} for role, ids in roles.items()}
    assert shapes["heldout_stories"] <= shapes["demonstrated"] and shapes["heldout_stories"] <= shapes["reward_only"]
    per_shape = Counter(wp.shape_id(s) for s in roles["demonstrated"])
    assert min(per_shape[shape] for shape in shapes["heldout_stories"]) >= 3  # several stories demonstrated
    # heldout_shapes stays a yardstick of new programs (wp11 aside, which tells wp03's program).
    assert {wp.TEMPLATES[i].shape for i in wp.EVAL_TEMPLATES if i != "wp11"}.isdisjoint(
        {wp.ALL_STORIES[s].shape for s in roles["demonstrated"] | roles["reward_only"]})


@pytest.mark.parametrize("difficulty", [1, 2])
def test_split_rows_come_from_their_role_only(difficulty):
    rows = {split: load_task("word_problems", split, n=300, seed=1, difficulty=difficulty)
            for split in (*ROLES, "heldout_shapes", "train")}
    for role in ROLES:
        stories = {s for s in wp.STORY_ROLES[role] if wp.ALL_STORIES[s].ops <= difficulty + 1}
        assert set(rows[role]["template"]) <= stories
        assert len(set(rows[role]["template"])) >= 0.9 * len(stories)  # draws spread over the role's stories
        assert all(wp.shape_id(t) == shape for t, shape in zip(rows[role]["template"], rows[role]["shape"]))
    training = [q for split in ("demonstrated", "reward_only", "train") for q in rows[split]["question"]]
    held_out = rows["heldout_stories"]["question"]
    assert not set(training) & set(held_out)
    assert not {skeleton(q) for q in training} & {skeleton(q) for q in held_out}
    joined = "\n".join(training)
    pieces = [f for s in wp.STORY_ROLES["heldout_stories"] if wp.ALL_STORIES[s].ops <= difficulty + 1
              for f in fragments(s)]
    assert pieces and not [f for f in pieces if f in joined]
    # The check above can see: a training role's own fragments do show up in its rows.
    assert [f for s in set(rows["reward_only"]["template"]) for f in fragments(s) if f in joined]


def test_store_and_warm_start_hold_demonstrated_stories_only(tmp_path):
    from rapo_trl.embeddings import HashingEmbedder
    from rapo_trl.store import StoreConfig, TraceStore

    demonstrated = to_rapo_rows(load_task("word_problems", "demonstrated", n=60, seed=0, difficulty=1), tools=[])
    reward_only = load_task("word_problems", "reward_only", n=100, seed=0, difficulty=1)
    held_out = load_task("word_problems", "heldout_stories", n=150, seed=0, difficulty=1)
    store = TraceStore(tmp_path / "store", embedder=HashingEmbedder(), config=StoreConfig(show_progress=False))
    by_prompt = {str(row["prompt"]): row for row in demonstrated}
    rng = random.Random(0)
    store.build_from_agent(lambda p: wp.expert(by_prompt[str(p)], error_rate=0.25, rng=rng), demonstrated,
                           rapo_outcome_reward, num_samples=2, keep_top_k=2)
    records = store.to_dataset(include_embeddings=False)
    text = "\n".join(str(value) for column in records.column_names for value in records[column])
    warm = "\n".join(trajectories_from_store(store, min_reward=1.0).values())
    assert warm and sum(row["question"] in text for row in demonstrated) > 0  # the checks below can see questions
    assert any(f"print({wp.ALL_STORIES[s].expression})" in text for s in set(demonstrated["template"]))
    by_id = {row["question_id"]: row for row in demonstrated}
    stored = {skeleton(by_id[i]["question"]) for i in records["question_id"]}
    for rows in (reward_only, held_out):  # neither the reward-only nor the held-out stories are demonstrated
        assert not {skeleton(q) for q in rows["question"]} & stored
        for story in set(rows["template"]):
            assert not [f for f in fragments(story) if f in text or f in warm], story
            assert f"print({wp.ALL_STORIES[story].expression})" not in text, story  # nor its program as written


def test_fresh_reward_only_questions_are_never_rl_training_rows_whatever_the_seed_or_size():
    """``reward_only_fresh`` (the primary yardstick) asks RL's own stories, and no draw of a training split, with any
    seed, size or difficulty, holds one of its questions: the two are kept apart by content hash."""
    fresh = {q for seed in (0, 1, 7) for difficulty in (1, 3)
             for q in load_task("word_problems", "reward_only_fresh", n=400, seed=seed, difficulty=difficulty)["question"]}
    training = {q for seed in (0, 1, 2, 3) for difficulty in (1, 3) for split in wp.TRAINING_SPLITS
                for q in load_task("word_problems", split, n=600, seed=seed, difficulty=difficulty)["question"]}
    assert len(fresh) > 2000 and len(training) > 10000
    assert not fresh & training
    assert {split_of(q) for q in fresh} == {"eval"}
    # The same stories as RL's: every reward-only story of the difficulty is asked, and nothing else.
    rows = load_task("word_problems", "reward_only_fresh", n=300, seed=0, difficulty=1)
    stories = {s for s in wp.STORY_ROLES["reward_only"] if wp.ALL_STORIES[s].ops <= 2}
    assert set(rows["template"]) == stories
    assert set(wp.SPLITS["reward_only_fresh"]) == set(wp.SPLITS["reward_only"])
    assert "reward_only_fresh" in wp.EVAL_SPLITS and "reward_only_fresh" not in wp.TRAINING_SPLITS


def test_reward_only_draws_training_bucket_questions_only_and_a_smaller_draw_is_a_prefix():
    rows = load_task("word_problems", "reward_only", n=200, seed=0, difficulty=1)
    assert {split_of(q) for q in rows["question"]} == {"train"}
    assert len(set(rows["question"])) == 200
    assert load_task("word_problems", "reward_only", n=50, seed=0, difficulty=1)["question"] == rows["question"][:50]
