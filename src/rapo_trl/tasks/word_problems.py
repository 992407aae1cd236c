"""Demo task ``word_problems``: 40 hand-written arithmetic word problem templates, solved with ``<python>``.

The templates and the further stories of their programs are data (``rapo_trl/data/stories/*.yaml``, read by
:mod:`rapo_trl.tasks.story_data`); this module decides which story serves which split.

Unlike ``arithmetic`` (six templates; its eval split differs only in the numbers), this task splits by
**template**: the ids in :data:`EVAL_TEMPLATES` never produce a training row, so the eval split asks
for the same skills (2-4 operations over ``+ - * //`` with parentheses) in wordings, domains and
sentence structures the training rows, a store built from them and a warm start on them never show.
Every operation mix (operation count and operator set) of an eval template also occurs in training,
so what eval tests is transfer to new wordings, not unseen operators.

Knobs of :func:`load`:

- ``difficulty`` shapes the *training* distribution: 1 = two-operation templates only, 2 = up to
  three operations, 3 = all (two to four; the default). It is meant for the training split: the
  eval split keeps every eval template unless a lower ``difficulty`` is passed for it too (the
  ``rapo`` CLI's ``task_difficulty`` applies to training rows only).
- ``digits`` (0, 1 or 2; default 0) adds that many digits to the large quantities of every story
  (those of 3+ digits; small multipliers and divisors keep their range).
- ``tool_steps`` (``"one"``, the default, or ``"per_operation"``) says how the scripted expert uses ``<python>``:
  one call for the whole expression, or one call per operation, each later call using the number an earlier one
  printed (:mod:`rapo_trl.tasks.operation_steps`). The questions and answers are the same either way; only
  ``per_operation`` rows carry a ``tool_steps`` column (the expert reads it); ``one`` rows carry none.

Division is always ``//``: a story either asks for whole units ("full boxes", "complete walls":
floor division) or shares exactly ("split equally"), in which case the numbers are drawn so the
division has no remainder.
"""

from __future__ import annotations

import random

from datasets import Dataset

from rapo_trl.tasks.operation_steps import DEFAULT_TOOL_STEPS, check_tool_steps, per_operation_expert
from rapo_trl.tasks.python_expert import python_expert
from rapo_trl.tasks.splits import split_of, stable_hash
from rapo_trl.tasks.story_data import load_stories
from rapo_trl.tasks.story_template import StoryTemplate
from rapo_trl.tasks.trajectory import run_python_locally

DEFAULT_SIZES = {"train": 1000, "eval": 200}
DIFFICULTY_MAX_OPS = {1: 2, 2: 3, 3: 4}  # difficulty -> most operations a template may have
DEFAULT_DIFFICULTY = 3  # every template
DIGITS_RANGE = (0, 2)

_Template = StoryTemplate
_FILES = load_stories("templates", "two_ops", "three_ops")  # rapo_trl/data/stories/*.yaml
_TEMPLATES = _FILES["templates"]  # 2-4 operations, in file order (the training templates' order follows it)

TEMPLATES: dict[str, _Template] = {t.id: t for t in _TEMPLATES}

# Held out: never drawn for training. Chosen so every (operation count, operator set) among them also
# occurs in training, and four of them use parentheses. Their programs are new to training (``heldout_shapes``),
# except wp11, whose expression has the shape of training wp03 (``a + b * c``).
EVAL_TEMPLATES = ("wp06", "wp07", "wp11", "wp20", "wp23", "wp26", "wp27", "wp28", "wp34", "wp35", "wp39", "wp40")
TRAIN_TEMPLATES = tuple(t for t in TEMPLATES if t not in EVAL_TEMPLATES)

# --- more stories of the training programs, split by story into three roles ---
# Each training template of 2 or 3 operations has further stories of its program (data/stories/two_ops.yaml:
# eleven per program, three_ops.yaml: four): new domains, wordings and quantity orders. By story number, fixed before
# any model saw them: new stories 4 and 5 are *held out* (eval only), 3, 10 and 11 are *reward-only* (RL questions
# with answers, demonstrated nowhere), the template and every other story are *demonstrated* (the store and the
# warm start).
STORIES: dict[str, _Template] = {t.id: t for t in (*_FILES["two_ops"], *_FILES["three_ops"])}
HELD_OUT_STORY_NUMBERS = (4, 5)
REWARD_ONLY_STORY_NUMBERS = (3, 10, 11)


def _story_number(story_id: str) -> int:
    """0 for a template, n for its story ``wpNN_sn``."""
    return int(story_id.split("_s")[1]) if "_s" in story_id else 0


def _story_roles() -> dict[str, tuple[str, ...]]:
    roles: dict[str, list[str]] = {"demonstrated": [], "reward_only": [], "heldout_stories": []}
    by_number = sorted(STORIES, key=lambda s: (STORIES[s].shape_of_template, _story_number(s)))
    for story_id in [*TRAIN_TEMPLATES, *by_number]:
        number = _story_number(story_id)
        role = ("heldout_stories" if number in HELD_OUT_STORY_NUMBERS
                else "reward_only" if number in REWARD_ONLY_STORY_NUMBERS else "demonstrated")
        roles[role].append(story_id)
    return {role: tuple(ids) for role, ids in roles.items()}


STORY_ROLES = _story_roles()
"""``role -> story ids``: demonstrated, reward_only and heldout_stories (disjoint; see above)."""
ALL_STORIES: dict[str, _Template] = {**TEMPLATES, **STORIES}
SPLITS = {
    "train": TRAIN_TEMPLATES,  # the original training templates, one story each
    "eval": EVAL_TEMPLATES,
    "heldout_shapes": EVAL_TEMPLATES,  # new programs: the stretch yardstick
    **STORY_ROLES,  # demonstrated, reward_only, heldout_stories (known programs, new wordings)
    "reward_only_fresh": STORY_ROLES["reward_only"],  # RL's own stories, questions RL never trains on
}
"""Split name -> the story ids it draws from. ``eval`` and ``heldout_shapes`` are the same questions;
``reward_only`` and ``reward_only_fresh`` share stories but never a question (:data:`QUESTION_BUCKETS`)."""
QUESTION_BUCKETS = {"reward_only": "train", "reward_only_fresh": "eval"}
"""Splits that share stories, kept apart by question: each keeps only the questions whose content hash
(`rapo_trl.tasks.splits.split_of`) falls in its bucket, so no seed or size makes them overlap."""
TRAINING_SPLITS = ("train", "demonstrated", "reward_only")
EVAL_SPLITS = ("eval", "heldout_shapes", "heldout_stories", "reward_only_fresh")


def shape_id(story_id: str) -> str:
    """The template whose program ``story_id`` tells (itself for a template)."""
    return ALL_STORIES[story_id].shape_of_template or story_id


def templates(split: str, difficulty: int = DEFAULT_DIFFICULTY) -> list[_Template]:
    """The stories ``split`` draws from, limited to ``difficulty``'s operation count."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    if difficulty not in DIFFICULTY_MAX_OPS:
        raise ValueError(f"difficulty must be one of {', '.join(map(str, DIFFICULTY_MAX_OPS))}, got {difficulty!r}")
    return [ALL_STORIES[i] for i in SPLITS[split] if ALL_STORIES[i].ops <= DIFFICULTY_MAX_OPS[difficulty]]


def load(
    split: str = "train",
    n: int | None = None,
    seed: int = 0,
    difficulty: int | None = DEFAULT_DIFFICULTY,
    digits: int = 0,
    tool_steps: str = DEFAULT_TOOL_STEPS,
) -> Dataset:
    """``n`` problems of ``split`` (columns question, answer, question_id, code, template, ops, shape).

    Splits (see :data:`SPLITS`): ``train`` draws from the original training templates, ``eval`` (alias
    ``heldout_shapes``) only from :data:`EVAL_TEMPLATES`; ``demonstrated``, ``reward_only`` and
    ``heldout_stories`` from the story roles of :data:`STORY_ROLES`; ``reward_only_fresh`` (eval: fresh
    questions of RL's own stories) from the reward-only stories, never a question ``reward_only`` can draw
    (:data:`QUESTION_BUCKETS`). ``template`` is the story's id and
    ``shape`` the template whose program it tells. ``difficulty`` (1, 2 or 3 = all; ``None`` = 3) caps the
    operation count; ``digits`` (0..2) widens the large quantities; ``tool_steps`` (``one`` or ``per_operation``)
    is how the expert solves them, never which questions are drawn. Deterministic for a given argument set.
    """
    check_tool_steps(tool_steps)
    difficulty = DEFAULT_DIFFICULTY if difficulty is None else difficulty
    pool = templates(split, difficulty)
    if not isinstance(digits, int) or not DIGITS_RANGE[0] <= digits <= DIGITS_RANGE[1]:
        raise ValueError(f"digits must be an integer from {DIGITS_RANGE[0]} to {DIGITS_RANGE[1]}, got {digits!r}")
    n = DEFAULT_SIZES["eval" if split in EVAL_SPLITS else "train"] if n is None else n
    # tool_steps stays out of the seed: both settings draw the same questions (splits, buckets, held-out stories).
    rng = random.Random(f"word_problems:{split}:{seed}:{difficulty}:{digits}")
    bucket = QUESTION_BUCKETS.get(split)
    rows, seen = [], set()
    while len(rows) < n:
        template = rng.choice(pool)
        question, code = template.sample(rng, digits)
        if question in seen or (bucket is not None and split_of(question) != bucket):
            continue
        seen.add(question)
        rows.append(
            {
                "question": question,
                "answer": run_python_locally(code).strip(),
                "question_id": f"word_problems-{stable_hash(question)}",
                "code": code,
                "template": template.id,
                "ops": template.ops,
                "shape": shape_id(template.id),
                # Only when set: default rows keep the columns stores and warm-start caches were built from (their keys).
                **({"tool_steps": tool_steps} if tool_steps != DEFAULT_TOOL_STEPS else {}),
            }
        )
    return Dataset.from_list(rows)


_PLANS = [
    "The quantities are too large to combine reliably in my head, so I will let Python do it.",
    "I will name each quantity in the story, write the calculation as one expression and run it.",
    "Let me turn the story into variables and a single expression, then evaluate it with Python.",
    "I need to work out which quantities combine in which order; Python will do the arithmetic.",
]


def expert(question_row: dict, error_rate: float = 0.0, rng: random.Random | None = None, tools=None) -> str:
    """A correct tagged trajectory for a ``word_problems`` row (think, one ``<python>`` call over
    named variables, think, ``\\boxed{}`` answer); with probability ``error_rate`` one whose code has
    a slip, so its (faithfully reported) answer is wrong. A row loaded with ``tool_steps="per_operation"``
    gets one call per operation instead (:func:`rapo_trl.tasks.operation_steps.per_operation_expert`).

    ``rng`` defaults to one seeded by the question id; ``tools`` may map ``"python"`` to the real
    ``PythonTool`` so the result block is exactly what it prints.
    """
    if check_tool_steps(question_row.get("tool_steps") or DEFAULT_TOOL_STEPS) == "per_operation":
        return per_operation_expert(question_row, None, error_rate, rng, tools)
    return python_expert(question_row, _PLANS, error_rate, rng, tools)
