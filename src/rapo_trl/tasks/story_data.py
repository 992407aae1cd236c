"""Word-problem stories from the package's data files, checked when loaded.

The stories are prose, so they live as data (``rapo_trl/data/stories/<name>.yaml``, shipped in the wheel and
read through ``importlib.resources``, so an installed package finds them); this module turns each entry into a
:class:`~rapo_trl.tasks.story_template.StoryTemplate` and refuses a malformed one with :class:`StoryDataError`,
naming the file and the entry, before any question is drawn from it.

A file is a YAML list of entries, each a mapping with:

- ``id`` (required): stable, never renumbered: question ids and the splits depend on it.
- ``story`` (required): the wording, a format string over exactly the variables, plus optionally ``{name}``
  (a person's name drawn per question).
- ``variables`` (required): ``name: range``, sampled in the order written; a range is ``[low, high]``
  (inclusive integers) or one of :data:`NAMED_RANGES` (``N3`` .. ``N6``: the 3- to 6-digit quantities).
- ``expression`` (required): the program, Python over exactly the variable names with ``+ - * //`` and
  parentheses only.
- ``exact``: ``variable: remainder expression``; after sampling, ``variable -= remainder``, so a division the
  story calls exact ("shared equally") leaves nothing over.
- ``shape_of``: the id of the template whose program this story retells (absent for a template); the two
  expressions must have the same shape (:func:`~rapo_trl.tasks.story_template.shape_of`).

A key written twice in one mapping (an entry's, or its variables') is refused: YAML would keep the later value.
"""

from __future__ import annotations

import ast
import string
from importlib import resources

import yaml

from rapo_trl.tasks.story_template import N3, N4, N5, N6, OPERATORS, StoryTemplate

NAMED_RANGES = {"N3": N3, "N4": N4, "N5": N5, "N6": N6}
REQUIRED = ("id", "story", "variables", "expression")
OPTIONAL = ("exact", "shape_of")
STORY_FOLDER = "stories"
"""Under the package's ``data`` folder."""


class StoryDataError(ValueError):
    """A story data file or one of its entries is malformed; the message names both."""


def load_stories(*names: str) -> dict[str, list[StoryTemplate]]:
    """The stories of each data file ``names`` (``rapo_trl/data/stories/<name>.yaml``), in file order.

    Ids must be unique across all the files loaded together, and a ``shape_of`` must name a story among them.
    """
    loaded = {}
    for name in names:
        source = f"{STORY_FOLDER}/{name}.yaml"
        path = resources.files("rapo_trl").joinpath("data", STORY_FOLDER, f"{name}.yaml")
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError as error:
            raise StoryDataError(f"{source}: no such story file in the rapo_trl package's data") from error
        loaded[name] = parse_stories(text, source)
    check_references({f"{STORY_FOLDER}/{name}.yaml": stories for name, stories in loaded.items()})
    return loaded


class _UniqueKeyLoader(yaml.SafeLoader):
    """``SafeLoader`` refusing a key written twice in one mapping, which YAML would settle by keeping the later
    value: an entry whose "- " was dropped merges into the one before it, and that story is silently lost."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"{key!r} is written twice in one mapping", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def parse_stories(text: str, source: str) -> list[StoryTemplate]:
    """The entries of one data file's ``text``; ``source`` names the file in errors."""
    try:
        entries = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as error:
        raise StoryDataError(f"{source}: not valid YAML: {error}") from error
    if not isinstance(entries, list):
        raise StoryDataError(f"{source}: expected a list of story entries, got {type(entries).__name__}")
    return [_story(entry, f"{source}, entry {position}") for position, entry in enumerate(entries, 1)]


def check_references(files: dict[str, list[StoryTemplate]]) -> None:
    """Ids unique across ``files`` (file name -> its stories); every ``shape_of`` names one of them whose
    program has the story's shape."""
    where: dict[str, str] = {}
    for source, stories in files.items():
        for position, story in enumerate(stories, 1):
            at = f"{source}, entry {position} ({story.id})"
            if story.id in where:
                raise StoryDataError(f"{at}: id {story.id!r} is also {where[story.id]}")
            where[story.id] = at
    by_id = {story.id: story for stories in files.values() for story in stories}
    for story in by_id.values():
        told = story.shape_of_template
        if told is None:
            continue
        if told not in by_id:
            raise StoryDataError(f"{where[story.id]}: shape_of names {told!r}, which no loaded story file holds")
        if by_id[told].shape != story.shape:
            raise StoryDataError(f"{where[story.id]}: the expression {story.expression!r} is not the program of "
                                 f"{told} ({by_id[told].expression!r}), which shape_of says it retells")


def _story(entry, at: str) -> StoryTemplate:
    if not isinstance(entry, dict):
        raise StoryDataError(f"{at}: expected a mapping with {', '.join(REQUIRED)}, got {type(entry).__name__}")
    if isinstance(entry.get("id"), str):
        at = f"{at} ({entry['id']})"
    missing = [key for key in REQUIRED if key not in entry]
    if missing:
        raise StoryDataError(f"{at}: missing {', '.join(missing)}")
    unknown = sorted(str(key) for key in entry if key not in REQUIRED + OPTIONAL)
    if unknown:
        raise StoryDataError(f"{at}: unknown key(s) {', '.join(unknown)} (known: {', '.join(REQUIRED + OPTIONAL)})")
    for key in ("id", "story", "expression", "shape_of"):
        if key in entry and (not isinstance(entry[key], str) or not entry[key].strip()):
            raise StoryDataError(f"{at}: {key} must be a non-empty string, got {entry[key]!r}")
    variables = _variables(entry["variables"], at)
    _check_program(entry["expression"], variables, f"{at}: expression")
    _check_story(entry["story"], variables, at)
    exact = entry.get("exact") or {}
    if not isinstance(exact, dict):
        raise StoryDataError(f"{at}: exact must be a mapping of variable: remainder expression, got {exact!r}")
    for variable, remainder in exact.items():
        if variable not in variables:
            raise StoryDataError(f"{at}: exact names {variable!r}, which is not one of the variables")
        if not isinstance(remainder, str):
            raise StoryDataError(f"{at}: exact {variable}: expected an expression, got {remainder!r}")
        _check_program(remainder, variables, f"{at}: exact {variable}", every_variable=False)
    return StoryTemplate(entry["id"], entry["story"], variables, entry["expression"],
                         exact=tuple(exact.items()), shape_of_template=entry.get("shape_of"))


def _variables(value, at: str) -> dict[str, tuple[int, int]]:
    if not isinstance(value, dict) or not value:
        raise StoryDataError(f"{at}: variables must be a non-empty mapping of name: range, got {value!r}")
    variables = {}
    for name, bounds in value.items():
        if not isinstance(name, str) or not name.isidentifier() or name == "name":
            # YAML reads an unquoted yes/no/on/off key as a boolean: this says so instead of failing later
            raise StoryDataError(f"{at}: variable {name!r} is not a Python identifier other than 'name'")
        bounds = NAMED_RANGES.get(bounds, bounds) if isinstance(bounds, str) else bounds
        if (not isinstance(bounds, list | tuple) or len(bounds) != 2
                or not all(isinstance(b, int) and not isinstance(b, bool) for b in bounds) or bounds[0] > bounds[1]):
            raise StoryDataError(f"{at}: variable {name}: range must be [low, high] (integers, low <= high) or "
                                 f"one of {', '.join(NAMED_RANGES)}, got {value[name]!r}")
        variables[name] = tuple(bounds)
    return variables


def _check_program(expression: str, variables: dict, at: str, every_variable: bool = True) -> None:
    """``expression`` parses, uses only variables, integers, parentheses and + - * // (and %, in a remainder:
    ``every_variable=False``), and names every variable when it is the story's program (a quantity the story
    gives but the program ignores is a mistake in one of the two)."""
    operators = tuple(OPERATORS) + (() if every_variable else (ast.Mod,))
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as error:
        raise StoryDataError(f"{at} {expression!r} is not a Python expression ({error.msg})") from error
    for node in ast.walk(tree.body):
        allowed = (isinstance(node, (ast.Name, ast.Load, *operators))
                   or (isinstance(node, ast.BinOp) and isinstance(node.op, operators))
                   or (isinstance(node, ast.Constant) and type(node.value) is int))
        if not allowed:
            symbols = "+ - * //" + ("" if every_variable else " %")
            raise StoryDataError(f"{at} {expression!r}: {ast.unparse(node) if isinstance(node, ast.expr) else node} "
                                 f"is not allowed (variables, integers and {symbols} only)")
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    if used - set(variables):
        raise StoryDataError(f"{at} {expression!r} uses {', '.join(sorted(used - set(variables)))}, not variables")
    if every_variable and set(variables) - used:
        raise StoryDataError(f"{at} {expression!r} never uses {', '.join(sorted(set(variables) - used))}")


def _check_story(story: str, variables: dict, at: str) -> None:
    """The story's placeholders are exactly the variables (and optionally ``{name}``), without format specs."""
    try:
        fields = [(field, spec, conversion) for _, field, spec, conversion in string.Formatter().parse(story)
                  if field is not None]
    except ValueError as error:  # an unmatched brace
        raise StoryDataError(f"{at}: story is not a valid format string ({error})") from error
    if any(spec or conversion for _, spec, conversion in fields):
        raise StoryDataError(f"{at}: story placeholders take no format spec or conversion")
    named = {field for field, _, _ in fields} - {"name"}
    if named - set(variables):
        raise StoryDataError(f"{at}: story placeholders {', '.join(sorted(named - set(variables)))} are not variables")
    if set(variables) - named:
        raise StoryDataError(f"{at}: story never mentions {', '.join(sorted(set(variables) - named))}")
