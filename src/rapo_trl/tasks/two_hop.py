"""Demo task ``two_hop``: questions over the invented world that need two ``<search>`` calls (and,
for the year questions, a ``<python>`` subtraction: the one kind that earns the multi-tool bonus)."""

from __future__ import annotations

import functools
import math
import random
import re
from collections import Counter

from datasets import Dataset

from rapo_trl.tasks.splits import check_split, split_of, stable_hash
from rapo_trl.tasks.trajectory import TrajectoryWriter, format_search_results, run_python_locally
from rapo_trl.tasks.world import build_world, passages

SEARCH_TOP_K = 3

_QUESTIONS = {
    "founder_birthplace": "In which city was the founder of {company} born?",
    "hq_country": "In which country are the headquarters of {company}?",
    "founding_age": "How many years after its founder was born was {company} founded?",
}


def corpus() -> Dataset:
    """The task's corpus (columns title, text), ready for ``SearchTool(corpus())``."""
    return Dataset.from_list(passages(build_world()))


def _gold(kind: str, company: str) -> str:
    world = build_world()
    c = world.companies[company]
    if kind == "founder_birthplace":
        return world.people[c.founder].birth_city
    if kind == "hq_country":
        return world.city_country[c.hq_city]
    return str(c.founded_year - world.people[c.founder].birth_year)


@functools.cache
def _pool(split: str) -> tuple[dict, ...]:
    rows = []
    for company in build_world().companies:
        for kind, template in _QUESTIONS.items():
            question = template.format(company=company)
            if split_of(question) == split:
                rows.append(
                    {
                        "question": question,
                        "answer": [_gold(kind, company)],
                        "question_id": f"two_hop-{stable_hash(question)}",
                        "kind": kind,
                        "subject": company,
                    }
                )
    return tuple(rows)


def load(split: str = "train", n: int | None = None, seed: int = 0) -> Dataset:
    """``n`` questions of ``split`` in a seeded order (columns question, answer, question_id, kind,
    subject); ``n=None`` gives the whole split."""
    check_split(split)
    pool = list(_pool(split))
    if n is not None and n > len(pool):
        raise ValueError(f"two_hop has {len(pool)} {split} questions; asked for {n}")
    random.Random(f"two_hop:{split}:{seed}").shuffle(pool)
    return Dataset.from_list(pool[:n] if n is not None else pool)


# --- local stand-in for SearchTool: IDF-weighted word overlap, title words counted twice ---

_WORD_RE = re.compile(r"[a-z0-9]+")


def _words(text: str) -> list[str]:
    return _WORD_RE.findall(text.lower())


@functools.cache
def _index():
    docs = passages(build_world())
    tokens = [(set(_words(d["title"])), set(_words(d["text"]))) for d in docs]
    df = Counter(w for title, text in tokens for w in title | text)
    idf = {w: math.log(len(docs) / n) for w, n in df.items()}
    return docs, tokens, idf


def lexical_search(query: str, k: int = SEARCH_TOP_K) -> str:
    """Top-``k`` passages for ``query``, formatted like the search tool's output."""
    docs, tokens, idf = _index()
    words = set(_words(query))
    scores = [sum(idf.get(w, 0.0) * ((w in title) + (w in text)) for w in words) for title, text in tokens]
    best = sorted(range(len(docs)), key=lambda i: (-scores[i], i))[:k]
    return format_search_results([docs[i] for i in best])


def _other(options, gold: str, rng: random.Random) -> str:
    return rng.choice([o for o in sorted(options) if o != gold])


def expert(question_row: dict, error_rate: float = 0.0, rng: random.Random | None = None, tools=None) -> str:
    """A correct tagged trajectory for a ``two_hop`` row; with probability ``error_rate`` one that
    reads the results wrongly and answers something else.

    ``rng`` defaults to one seeded by the question id; ``tools`` may map ``"search"`` (and
    ``"python"``) to the real tools so result blocks are exactly what they return.
    """
    rng = rng or random.Random(question_row["question_id"])
    wrong = rng.random() < error_rate
    world = build_world()
    company = world.companies[question_row["subject"]]
    founder = world.people[company.founder]
    kind, gold = question_row["kind"], str(question_row["answer"][0])
    writer = TrajectoryWriter(tools, {"search": lexical_search, "python": run_python_locally})

    if kind == "hq_country":
        writer.think(
            f"I need to find where {company.name} is headquartered, then which country that city is in."
        )
        writer.call("search", f"{company.name} headquarters")
        writer.think(
            f"{company.name} has its headquarters in {company.hq_city}. Now I look up {company.hq_city}."
        )
        writer.call("search", f"{company.hq_city} city country")
        answer = _other(world.countries, gold, rng) if wrong else gold
        writer.think(f"{company.hq_city} is in {answer}.")
        writer.answer(f"The headquarters of {company.name} are in \\boxed{{{answer}}}.")
        return writer.text()

    writer.think(f"First I need to know who founded {company.name}; then I can look that person up.")
    writer.call("search", f"{company.name} founder")
    writer.think(
        f"{company.name} was founded in {company.founded_year} by {founder.name}. Next, {founder.name}'s biography."
    )
    writer.call("search", f"{founder.name} born")
    if kind == "founder_birthplace":
        # A typical slip: answering with the company's city instead of the founder's.
        decoy = company.hq_city if company.hq_city != gold else _other(world.city_country, gold, rng)
        answer = decoy if wrong else gold
        writer.think(f"{founder.name} was born in {answer}.")
        writer.answer(f"The founder of {company.name} was born in \\boxed{{{answer}}}.")
        return writer.text()

    # founding_age: subtract the two years with Python.
    birth_year = founder.birth_year + (rng.choice([-10, -1, 1, 10]) if wrong else 0)
    writer.think(
        f"{founder.name} was born in {birth_year} and the company was founded in {company.founded_year}."
    )
    value = writer.call("python", f"print({company.founded_year} - {birth_year})").strip()
    writer.think(f"The difference is {value} years.")
    writer.answer(f"{company.name} was founded \\boxed{{{value}}} years after its founder was born.")
    return writer.text()
