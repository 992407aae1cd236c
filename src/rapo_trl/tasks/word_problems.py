"""Demo task ``word_problems``: 40 hand-written arithmetic word problem templates, solved with ``<python>``.

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

Division is always ``//``: a story either asks for whole units ("full boxes", "complete walls":
floor division) or shares exactly ("split equally"), in which case the numbers are drawn so the
division has no remainder.
"""

from __future__ import annotations

import random

from datasets import Dataset

from rapo_trl.tasks.python_expert import python_expert
from rapo_trl.tasks.splits import split_of, stable_hash
from rapo_trl.tasks.stories_three_ops import STORIES as _STORIES_THREE_OPS
from rapo_trl.tasks.stories_two_ops import STORIES as _STORIES_TWO_OPS
from rapo_trl.tasks.story_template import N3, N4, N5, N6, StoryTemplate
from rapo_trl.tasks.trajectory import run_python_locally

DEFAULT_SIZES = {"train": 1000, "eval": 200}
DIFFICULTY_MAX_OPS = {1: 2, 2: 3, 3: 4}  # difficulty -> most operations a template may have
DEFAULT_DIFFICULTY = 3  # every template
DIGITS_RANGE = (0, 2)

_Template = StoryTemplate

_TEMPLATES = [
    # --- two operations ---
    _Template(
        "wp01",
        "Every crate of screws holds {per_crate} screws. A hardware shop received {crates_a} crates on "
        "Monday and {crates_b} on Tuesday. How many screws arrived over the two days?",
        {"crates_a": N3, "crates_b": N3, "per_crate": (24, 96)},
        "(crates_a + crates_b) * per_crate",
    ),
    _Template(
        "wp02",
        "On {name}'s farm the hens lay {per_day} eggs a day. The eggs are packed into cartons of {carton}, "
        "and only full cartons go to market. How many full cartons come from {days} days of laying?",
        {"per_day": N4, "carton": (12, 30), "days": (14, 60)},
        "per_day * days // carton",
    ),
    _Template(
        "wp03",
        "{name} has {balance} coins in a savings account and pays in {deposit} coins at the end of every "
        "month. What is the balance after {months} monthly payments?",
        {"balance": N5, "deposit": (100, 9999), "months": (12, 60)},
        "balance + deposit * months",
    ),
    _Template(
        "wp04",
        "How many complete cases of {per_case} bottles can a bottling plant pack today? It filled {filled} "
        "bottles, but {cracked} of them were cracked and thrown away.",
        {"filled": N6, "cracked": N4, "per_case": (12, 48)},
        "(filled - cracked) // per_case",
    ),
    _Template(
        "wp05",
        "A long-distance cyclist plans to ride {per_day} metres on each of {days} days. So far she has "
        "covered {done} metres of that plan. How many metres of the plan are still ahead of her?",
        {"per_day": N5, "days": (20, 60), "done": N5},
        "per_day * days - done",
    ),
    _Template(
        "wp06",
        "Calculators cost {price} pounds each, and a school spends its budget of {budget} pounds on as "
        "many whole calculators as it can afford. When the delivery is opened, {broken} calculators turn "
        "out to be broken. How many working calculators does the school end up with?",
        {"price": (12, 99), "budget": N6, "broken": (100, 999)},
        "budget // price - broken",
    ),
    _Template(
        "wp07",
        "The bakers plan {batches} batches of rolls for the morning, each needing {per_batch} grams of "
        "flour. Before they start, the store room holds {flour} grams. What weight of flour, in grams, "
        "is left once all the batches are made?",
        {"batches": (12, 48), "per_batch": (100, 9999), "flour": (500_000, 999_999)},
        "flour - per_batch * batches",
    ),
    _Template(
        "wp08",
        "During March a container port unloaded {unloaded} containers from arriving ships and loaded "
        "{loaded} onto departing ones. It began the month with {start} containers on the dock. How many "
        "containers were on the dock when March ended?",
        {"unloaded": (50_000, 99_999), "loaded": N5, "start": (50_000, 99_999)},
        "start + unloaded - loaded",
    ),
    _Template(
        "wp09",
        "A prize fund of {fund} coins is split equally among the league's {clubs} clubs, and each club "
        "splits its share equally among its {players} players. How many coins does each player get?",
        {"fund": N6, "clubs": (12, 24), "players": (11, 30)},
        "fund // clubs // players",
        exact=(("fund", "fund % (clubs * players)"),),
    ),
    _Template(
        "wp10",
        "A road crew laid {laid_a} metres of water pipe last week and {laid_b} metres this week. A marker "
        "post is set at the end of every complete {gap} metres of pipe, counting from the start. How many "
        "marker posts are there now?",
        {"laid_a": N5, "laid_b": N5, "gap": (25, 99)},
        "(laid_a + laid_b) // gap",
    ),
    _Template(
        "wp11",
        "Besides the {donated} bandages a charity gave it, a hospital pharmacy received an order of "
        "{packs} packs with {per_pack} bandages in each. Find the total number of bandages the pharmacy "
        "took in.",
        {"donated": N4, "packs": N3, "per_pack": (12, 60)},
        "packs * per_pack + donated",
    ),
    _Template(
        "wp12",
        "{sold} kilograms of an orchard's pears were sold at the farm gate, and {bruised} kilograms, too "
        "bruised to sell, became jam. The orchard picked {harvest} kilograms in all. What weight, in "
        "kilograms, is left for the wholesale market?",
        {"harvest": (500_000, 999_999), "bruised": N5, "sold": N5},
        "harvest - bruised - sold",
    ),
    # --- three operations ---
    _Template(
        "wp13",
        "A cinema charges {price} pence a ticket. It sold {fri} tickets on Friday and {sat} on Saturday, "
        "and paid back {refunds} pence for a cancelled screening. What were its takings in pence after the "
        "refund?",
        {"price": (350, 999), "fri": N4, "sat": N4, "refunds": N5},
        "price * (fri + sat) - refunds",
    ),
    _Template(
        "wp14",
        "Two lorries unload at a warehouse. The first carries {boxes_a} boxes of {size_a} tins, the "
        "second {boxes_b} boxes of {size_b} tins. How many tins did the warehouse receive?",
        {"boxes_a": N3, "size_a": (12, 48), "boxes_b": N3, "size_b": (12, 48)},
        "boxes_a * size_a + boxes_b * size_b",
    ),
    _Template(
        "wp15",
        "A quarry cut {cut} tonnes of stone this year, {waste} tonnes of it waste. Each tonne of good "
        "stone is sawn into {blocks} building blocks, and a truck leaves only when it is loaded with "
        "{per_truck} blocks. How many fully loaded trucks can leave the quarry?",
        {"cut": (50_000, 99_999), "waste": N4, "blocks": (12, 40), "per_truck": N3},
        "(cut - waste) * blocks // per_truck",
    ),
    _Template(
        "wp16",
        "The money from three bake sales is divided equally between {charities} charities. The sales "
        "raised {sale_a}, {sale_b} and {sale_c} pence. How many pence does each charity receive?",
        {"sale_a": N5, "sale_b": N5, "sale_c": N5, "charities": (12, 40)},
        "(sale_a + sale_b + sale_c) // charities",
        exact=(("sale_c", "(sale_a + sale_b + sale_c) % charities"),),
    ),
    _Template(
        "wp17",
        "In the morning each of a company's {buses} buses takes {per_bus} litres of diesel from the depot "
        "tank, which held {tank} litres at dawn. In the afternoon a tanker refills it with {delivery} "
        "litres. What does the tank hold at the end of the day, in litres?",
        {"buses": (12, 80), "per_bus": (100, 400), "tank": (500_000, 999_999), "delivery": N5},
        "tank - buses * per_bus + delivery",
    ),
    _Template(
        "wp18",
        "A textile mill wove {rolls} rolls of cloth, each {metres} metres long. {kept} metres are kept "
        "as samples, and the rest is cut into curtains of {per_curtain} metres. How many complete "
        "curtains can be cut?",
        {"rolls": N3, "metres": (50, 99), "kept": N3, "per_curtain": (12, 30)},
        "(rolls * metres - kept) // per_curtain",
    ),
    _Template(
        "wp19",
        "The archive already holds {old} digital volumes. This month it scans {pages} pages a day for "
        "{days} days and binds the scans into volumes of {per_volume} pages, counting only complete "
        "volumes. How many digital volumes does the archive hold after the month?",
        {"old": N4, "pages": N4, "days": (20, 31), "per_volume": N3},
        "pages * days // per_volume + old",
    ),
    _Template(
        "wp20",
        "{name}'s restaurant was full on {evenings} evenings in a row: {inside} diners inside and "
        "{terrace} on the terrace each evening. Over the same evenings it also sold {takeaway} takeaway "
        "meals. How many meals did it serve in all?",
        {"evenings": (12, 60), "inside": N3, "terrace": N3, "takeaway": N4},
        "(inside + terrace) * evenings + takeaway",
    ),
    _Template(
        "wp21",
        "Last week an airline flew {flights} flights of {seats} seats each. {empty} seats stayed empty, "
        "and crew travelling as passengers took {crew} more. Give the number of seats sold to paying "
        "passengers.",
        {"flights": (100, 400), "seats": (150, 400), "empty": N4, "crew": N3},
        "flights * seats - empty - crew",
    ),
    _Template(
        "wp22",
        "Two wells pump {well_a} and {well_b} litres of water a day into a bottling plant that fills "
        "{jug}-litre jugs; water that cannot fill a whole jug is returned to the river. {broken} full jugs "
        "break on the packing line. Calculate how many full jugs leave the plant each day.",
        {"well_a": N5, "well_b": N5, "jug": (12, 25), "broken": (10, 500)},
        "(well_a + well_b) // jug - broken",
    ),
    _Template(
        "wp23",
        "Of the {pupils} pupils at a school, {absent} are off sick on sports day. Those present are split "
        "into teams of exactly {team} pupils with nobody left out, and every team is handed {bibs} bibs. "
        "How many bibs are handed out?",
        {"pupils": N4, "absent": (12, 99), "team": (12, 20), "bibs": (12, 30)},
        "(pupils - absent) // team * bibs",
        exact=(("pupils", "(pupils - absent) % team"),),
    ),
    _Template(
        "wp24",
        "What do the tiles for two rooms cost, in pence, if one room needs {room_a} tiles, the other "
        "{room_b}, the list price is {price} pence per tile and a bulk discount takes {discount} pence "
        "off every tile?",
        {"room_a": N3, "room_b": N3, "price": (150, 999), "discount": (10, 99)},
        "(room_a + room_b) * (price - discount)",
    ),
    _Template(
        "wp25",
        "A solar park fills storage units of {unit_a} kilowatt-hours and a wind park fills units of "
        "{unit_b} kilowatt-hours. This week the solar park produced {solar} kilowatt-hours and the wind "
        "park {wind}. How many storage units were filled to the top in total?",
        {"unit_a": N3, "unit_b": N3, "solar": N6, "wind": N6},
        "solar // unit_a + wind // unit_b",
    ),
    _Template(
        "wp26",
        "A zoo bought {sacks} sacks of hay at {kg} kilograms a sack. The hay is shared out in whole "
        "kilograms, the same amount for each of its {elephants} elephants and {giraffes} giraffes, and "
        "whatever cannot be shared evenly is saved for next week. How many kilograms does each animal get?",
        {"sacks": N3, "kg": (20, 60), "elephants": (12, 30), "giraffes": (12, 40)},
        "sacks * kg // (elephants + giraffes)",
    ),
    _Template(
        "wp27",
        "For {days} days the post office sold {morning} stamps every morning and {afternoon} every "
        "afternoon. If it had {stamps} stamps before the first day, how many does it have after the last?",
        {"days": (12, 99), "morning": N3, "afternoon": N3, "stamps": (500_000, 999_999)},
        "stamps - (morning + afternoon) * days",
    ),
    _Template(
        "wp28",
        "The market bought {crates} crates of cod holding {per_crate} kilograms each from a fleet of "
        "{boats} boats that had each landed {catch} kilograms. How many kilograms of the catch did the "
        "market not buy?",
        {"crates": N3, "per_crate": (12, 99), "boats": (20, 60), "catch": (5000, 9999)},
        "boats * catch - crates * per_crate",
    ),
    # --- four operations ---
    _Template(
        "wp29",
        "A stadium sold {adult} adult and {child} child season passes, each good for {games} home games. "
        "At each of {missed} games, {no_shows} pass holders stayed away. How many times did a pass holder "
        "go through the gates over the season?",
        {"adult": N4, "child": N4, "games": (15, 25), "missed": (10, 15), "no_shows": N3},
        "(adult + child) * games - no_shows * missed",
    ),
    _Template(
        "wp30",
        "A biscuit factory bakes {trays} trays of {per_tray} biscuits, plus {extra} biscuits from a trial "
        "batch. Biscuits go into tins of {tin}, and only full tins are sent out, except that the first "
        "{samples} full tins are kept back as quality samples. How many tins are sent out?",
        {"trays": N3, "per_tray": (24, 60), "extra": N3, "tin": (12, 40), "samples": (10, 50)},
        "(trays * per_tray + extra) // tin - samples",
    ),
    _Template(
        "wp31",
        "{name}'s rent is {rent} coins a month. Starting the year with {savings} coins, {name} earns {wage} "
        "coins a week for {weeks} weeks and pays rent for {months} months. How many coins are left at the "
        "end?",
        {"savings": N5, "wage": (1000, 4999), "weeks": (40, 52), "rent": (500, 2999), "months": (10, 12)},
        "savings + wage * weeks - rent * months",
    ),
    _Template(
        "wp32",
        "A freight train brings {grain_a} tonnes of grain from one farm and {grain_b} tonnes from another. "
        "{spilled} tonnes are spilled while unloading, and the rest is divided equally among {silos} "
        "silos. Grain sells at {price} coins a tonne. What is the grain in one silo worth, in coins?",
        {"grain_a": N4, "grain_b": N4, "spilled": (10, 999), "silos": (12, 30), "price": N3},
        "(grain_a + grain_b - spilled) // silos * price",
        exact=(("grain_b", "(grain_a + grain_b - spilled) % silos"),),
    ),
    _Template(
        "wp33",
        "Each of a school's {classes} classes is to get the same whole number of items from an order of "
        "{packs_a} packs of {pens} pens and {packs_b} packs of {pencils} pencils; any leftovers stay in the "
        "office. How many items does each class get?",
        {"packs_a": N3, "pens": (12, 50), "packs_b": N3, "pencils": (12, 50), "classes": (12, 60)},
        "(packs_a * pens + packs_b * pencils) // classes",
    ),
    _Template(
        "wp34",
        "Each crossing of the big ferry has room for {capacity} cars, but {reserved} places are always "
        "kept free for emergency vehicles; it makes {crossings} full crossings a day. A smaller boat "
        "carries {small} cars on each of its {trips} trips. How many cars cross the strait each day?",
        {"capacity": (300, 999), "reserved": (12, 99), "crossings": (12, 30), "small": (20, 99),
         "trips": (12, 40)},
        "(capacity - reserved) * crossings + small * trips",
    ),
    _Template(
        "wp35",
        "Each garden wall takes {base} bricks for its footing and {upper} bricks above ground. The builder "
        "has {pallets} pallets of {per_pallet} bricks but has already used {used} of them on a shed. How "
        "many complete garden walls can still be built?",
        {"base": N3, "upper": N3, "pallets": (20, 99), "per_pallet": (300, 600), "used": N3},
        "(pallets * per_pallet - used) // (base + upper)",
    ),
    _Template(
        "wp36",
        "A school canteen has {sacks} sacks holding {grams} grams of rice each, and one portion uses "
        "{portion} grams; only full portions are served. This week, on each of {days} days, lunch needs "
        "{per_day} portions. How many full portions can still be served after this week?",
        {"sacks": (20, 99), "grams": (10_000, 25_000), "portion": (60, 99), "days": (3, 5),
         "per_day": (100, 399)},
        "sacks * grams // portion - days * per_day",
    ),
    _Template(
        "wp37",
        "A running club's three squads ran {squad_a}, {squad_b} and {squad_c} kilometres in training "
        "this year. A sponsor pays {rate} pence per kilometre, less a one-off handling fee of {fee} "
        "pence. Work out how many pence the club receives.",
        {"squad_a": N4, "squad_b": N4, "squad_c": N4, "rate": (12, 99), "fee": N3},
        "(squad_a + squad_b + squad_c) * rate - fee",
    ),
    _Template(
        "wp38",
        "A dairy collected {milk} litres of milk and set {cheese} litres aside for cheese; the rest goes "
        "into churns of {churn} litres. It also has {cream} millilitres of cream for jars of {jar} "
        "millilitres. Counting only full churns and full jars, how many containers are filled?",
        {"milk": N5, "cheese": N4, "churn": (20, 50), "cream": N6, "jar": (150, 500)},
        "(milk - cheese) // churn + cream // jar",
    ),
    _Template(
        "wp39",
        "From a budget of {budget} coins, a town council pays for {lamps} street lamps at {lamp_cost} "
        "coins each and {benches} benches at {bench_cost} coins each. How much of the budget is left?",
        {"budget": (500_000, 999_999), "lamps": (12, 99), "lamp_cost": N3, "benches": (12, 99),
         "bench_cost": N3},
        "budget - (lamps * lamp_cost + benches * bench_cost)",
    ),
    _Template(
        "wp40",
        "A courier pays its sorters {bonus} coins for every full sack of {sack} parcels. Today {vans} "
        "vans each brought in {parcels} parcels and cyclists brought {cycled} more. How many coins of "
        "bonus are paid today?",
        {"bonus": (12, 99), "sack": (12, 50), "vans": (12, 60), "parcels": N3, "cycled": N3},
        "(vans * parcels + cycled) // sack * bonus",
    ),
]

TEMPLATES: dict[str, _Template] = {t.id: t for t in _TEMPLATES}

# Held out: never drawn for training. Chosen so every (operation count, operator set) among them also
# occurs in training, and four of them use parentheses. Their programs are new to training (``heldout_shapes``),
# except wp11, whose expression has the shape of training wp03 (``a + b * c``).
EVAL_TEMPLATES = ("wp06", "wp07", "wp11", "wp20", "wp23", "wp26", "wp27", "wp28", "wp34", "wp35", "wp39", "wp40")
TRAIN_TEMPLATES = tuple(t for t in TEMPLATES if t not in EVAL_TEMPLATES)

# --- more stories of the training programs, split by story into three roles ---
# Each training template of 2 or 3 operations has further stories of its program (stories_two_ops.py: eleven per
# program, stories_three_ops.py: four): new domains, wordings and quantity orders. By story number, fixed before
# any model saw them: new stories 4 and 5 are *held out* (eval only), 3, 10 and 11 are *reward-only* (RL questions
# with answers, demonstrated nowhere), the template and every other story are *demonstrated* (the store and the
# warm start).
STORIES: dict[str, _Template] = {t.id: t for t in (*_STORIES_TWO_OPS, *_STORIES_THREE_OPS)}
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
) -> Dataset:
    """``n`` problems of ``split`` (columns question, answer, question_id, code, template, ops, shape).

    Splits (see :data:`SPLITS`): ``train`` draws from the original training templates, ``eval`` (alias
    ``heldout_shapes``) only from :data:`EVAL_TEMPLATES`; ``demonstrated``, ``reward_only`` and
    ``heldout_stories`` from the story roles of :data:`STORY_ROLES`; ``reward_only_fresh`` (eval: fresh
    questions of RL's own stories) from the reward-only stories, never a question ``reward_only`` can draw
    (:data:`QUESTION_BUCKETS`). ``template`` is the story's id and
    ``shape`` the template whose program it tells. ``difficulty`` (1, 2 or 3 = all; ``None`` = 3) caps the
    operation count; ``digits`` (0..2) widens the large quantities. Deterministic for a given argument set.
    """
    difficulty = DEFAULT_DIFFICULTY if difficulty is None else difficulty
    pool = templates(split, difficulty)
    if not isinstance(digits, int) or not DIGITS_RANGE[0] <= digits <= DIGITS_RANGE[1]:
        raise ValueError(f"digits must be an integer from {DIGITS_RANGE[0]} to {DIGITS_RANGE[1]}, got {digits!r}")
    n = DEFAULT_SIZES["eval" if split in EVAL_SPLITS else "train"] if n is None else n
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
    a slip, so its (faithfully reported) answer is wrong.

    ``rng`` defaults to one seeded by the question id; ``tools`` may map ``"python"`` to the real
    ``PythonTool`` so the result block is exactly what it prints.
    """
    return python_expert(question_row, _PLANS, error_rate, rng, tools)
