"""The invented world behind the ``two_hop`` task: people, cities, countries and companies that
exist nowhere else, so no model can know them from pretraining. Built from a fixed seed, so the
corpus every user gets is identical (a test pins its fingerprint)."""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass

WORLD_SEED = 20260301

_SYLLABLES = (
    "zor vex tal mir quon bel dra kith lum sar oth vin pel gra nix fen rul ost yar cel dun hav jor "
    "ket lis mor nal prav sil tro ulm wen zeb ar ek ith ova bri cal dor eph gil hol ivo"
).split()
_SUFFIXES = [
    "Labs",
    "Works",
    "Dynamics",
    "Foundry",
    "Systems",
    "Holdings",
    "Analytics",
    "Robotics",
    "Industries",
]
_INDUSTRIES = [
    "battery",
    "robotics",
    "shipping",
    "textile",
    "biotech",
    "software",
    "glassware",
    "aerospace",
    "seed",
]
_PROFESSIONS = [
    "chemist",
    "sculptor",
    "engineer",
    "economist",
    "botanist",
    "architect",
    "pilot",
    "composer",
    "surgeon",
]
_KNOWN_FOR = [
    "a patent on folding solar sails",
    "a widely read book about river trade",
    "restoring an old observatory",
    "a record-setting balloon flight",
    "founding a chess school for children",
    "a study of desert bees",
    "designing a famous footbridge",
    "collecting antique clocks",
]
_CITY_FEATURES = [
    "a salt harbour",
    "its copper market",
    "a glass cathedral",
    "terraced vineyards",
    "a lantern festival",
    "twin lighthouses",
]

N_COUNTRIES, N_CITIES, N_PEOPLE, N_COMPANIES = 12, 60, 240, 200


@dataclass(frozen=True)
class Person:
    name: str
    birth_city: str
    birth_year: int
    profession: str
    known_for: str


@dataclass(frozen=True)
class Company:
    name: str
    industry: str
    founder: str
    founded_year: int
    hq_city: str


@dataclass(frozen=True)
class World:
    countries: tuple[str, ...]
    city_country: dict[str, str]
    city_feature: dict[str, str]
    people: dict[str, Person]
    companies: dict[str, Company]


def _words(rng: random.Random, count: int, syllables: int, taken: set[str]) -> list[str]:
    words = []
    while len(words) < count:
        word = "".join(rng.choice(_SYLLABLES) for _ in range(syllables)).capitalize()
        if word not in taken:
            taken.add(word)
            words.append(word)
    return words


@functools.cache
def build_world(seed: int = WORLD_SEED) -> World:
    """The invented world for ``seed`` (every name single-use, so answers never overlap)."""
    rng, taken = random.Random(seed), set()
    countries = tuple(w + "ia" for w in _words(rng, N_COUNTRIES, 2, taken))
    cities = _words(rng, N_CITIES, 2, taken)
    firsts, lasts = _words(rng, N_PEOPLE, 2, taken), _words(rng, N_PEOPLE, 3, taken)
    people = {}
    for first, last in zip(firsts, lasts):
        name = f"{first} {last}"
        people[name] = Person(
            name,
            rng.choice(cities),
            rng.randint(1920, 1970),
            rng.choice(_PROFESSIONS),
            rng.choice(_KNOWN_FOR),
        )
    founders = rng.sample(sorted(people), N_COMPANIES)
    companies = {}
    for stem, founder in zip(_words(rng, N_COMPANIES, 2, taken), founders):
        name = f"{stem} {rng.choice(_SUFFIXES)}"
        companies[name] = Company(
            name,
            rng.choice(_INDUSTRIES),
            founder,
            people[founder].birth_year + rng.randint(22, 50),
            rng.choice(cities),
        )
    return World(
        countries,
        {c: rng.choice(countries) for c in cities},
        {c: rng.choice(_CITY_FEATURES) for c in cities},
        people,
        companies,
    )


def _a(word: str) -> str:
    return f"an {word}" if word[0] in "aeiou" else f"a {word}"


def passages(world: World) -> list[dict[str, str]]:
    """One encyclopedia-style passage per person, company and city. A person's passage does not name
    their company, so every question needs two look-ups."""
    out = []
    for p in world.people.values():
        surname = p.name.split()[-1]
        out.append(
            {
                "title": p.name,
                "text": f"{p.name} is {_a(p.profession)} born in {p.birth_year} in the city of {p.birth_city}. "
                f"{surname} is best known for {p.known_for}.",
            }
        )
    for c in world.companies.values():
        out.append(
            {
                "title": c.name,
                "text": f"{c.name} is {_a(c.industry)} company founded in {c.founded_year} by {c.founder}. "
                f"Its headquarters are in {c.hq_city}.",
            }
        )
    for city, country in world.city_country.items():
        out.append(
            {
                "title": city,
                "text": f"{city} is a city in {country}. It is known for {world.city_feature[city]}.",
            }
        )
    return out
