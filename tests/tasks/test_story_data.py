"""The word-problem stories load from the package's data files, and a malformed entry is refused with an error
naming its file and entry, before any question is drawn from it."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from rapo_trl.tasks import word_problems as wp
from rapo_trl.tasks.story_data import (
    NAMED_RANGES,
    StoryDataError,
    check_references,
    load_stories,
    parse_stories,
)

FILES = ("templates", "two_ops", "three_ops")
GOOD = {
    "id": "wp99",
    "story": "{name} packs {boxes} boxes of {per_box} pens. How many pens is that?",
    "variables": {"boxes": "N3", "per_box": [12, 40]},
    "expression": "boxes * per_box",
}


def parse(*entries):
    return parse_stories(yaml.safe_dump(list(entries), sort_keys=False), "stories/test.yaml")


def test_the_task_reads_every_story_from_the_data_files():
    loaded = load_stories(*FILES)
    assert [t.id for t in loaded["templates"]] == [t.id for t in wp._TEMPLATES] and len(wp._TEMPLATES) == 40
    assert [t.id for t in (*loaded["two_ops"], *loaded["three_ops"])] == list(wp.STORIES)
    assert loaded["templates"] == wp._TEMPLATES  # same stories, ranges and programs, in the same order


def test_a_good_entry_becomes_a_story_with_its_ranges_in_the_written_order():
    (story,) = parse({**GOOD, "variables": {"per_box": [12, 40], "boxes": "N3"}})
    assert list(story.variables) == ["per_box", "boxes"]  # sampling order is the file's order
    assert story.variables == {"per_box": (12, 40), "boxes": NAMED_RANGES["N3"]}
    assert story.exact == () and story.shape_of_template is None and story.ops == 1
    (exact,) = parse({**GOOD, "exact": {"boxes": "boxes % per_box"}})
    assert exact.exact == (("boxes", "boxes % per_box"),)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"expression": " "}, "expression must be a non-empty string"),
        ({"variables": {"boxes": "N3", "per_box": [40, 12]}}, "variable per_box: range must be [low, high]"),
        ({"variables": {"boxes": "N7", "per_box": [12, 40]}}, "range must be [low, high] (integers, low <= high) or one of N3"),
        ({"variables": {"boxes": "N3", True: [12, 40]}}, "variable True is not a Python identifier"),
        ({"expression": "boxes * per_box - 2 ** boxes"}, "2 ** boxes is not allowed"),
        ({"expression": "boxes * per_box + crates"}, "uses crates, not variables"),
        ({"expression": "boxes * 2"}, "never uses per_box"),
        ({"expression": "boxes * (per_box"}, "is not a Python expression"),
        ({"story": "{name} packs {boxes} boxes. How many pens?"}, "story never mentions per_box"),
        ({"story": "{boxes} boxes of {per_box} pens and {lids} lids"}, "story placeholders lids are not variables"),
        ({"story": "{boxes:>5} boxes of {per_box} pens"}, "no format spec"),
        ({"story": "{boxes} boxes of {per_box pens"}, "not a valid format string"),
        ({"exact": {"lids": "boxes % 2"}}, "exact names 'lids', which is not one of the variables"),
        ({"exact": {"boxes": "boxes % lids"}}, "uses lids, not variables"),
        ({"shapeof": "wp01"}, "unknown key(s) shapeof"),
    ],
)
def test_a_malformed_entry_is_refused_naming_the_file_and_the_entry(change, message):
    with pytest.raises(StoryDataError) as error:
        parse({**GOOD, "id": "wp98"}, {**GOOD, **change})
    assert str(error.value).startswith("stories/test.yaml, entry 2 (wp99): ")
    assert message in str(error.value)


def test_a_missing_key_a_non_mapping_and_a_non_list_file_are_named():
    with pytest.raises(StoryDataError, match=r"entry 1 \(wp99\): missing expression"):
        parse({k: v for k, v in GOOD.items() if k != "expression"})
    with pytest.raises(StoryDataError, match=r"entry 2: expected a mapping"):
        parse(GOOD, "wp01")
    with pytest.raises(StoryDataError, match=r"^stories/test.yaml: expected a list of story entries"):
        parse_stories("id: wp01\n", "stories/test.yaml")
    with pytest.raises(StoryDataError, match=r"^stories/test.yaml: not valid YAML"):
        parse_stories("- id: [wp01\n", "stories/test.yaml")


def test_ids_are_unique_across_files_and_shape_of_names_a_story_with_the_same_program():
    (template,) = parse(GOOD)
    (retold,) = parse({**GOOD, "id": "wp99_s1", "shape_of": "wp99", "expression": "per_box * boxes"})
    check_references({"a.yaml": [template], "b.yaml": [retold]})  # + and * operands in any order: same program
    with pytest.raises(StoryDataError, match=r"^b.yaml, entry 1 \(wp99\): id 'wp99' is also a.yaml, entry 1"):
        check_references({"a.yaml": [template], "b.yaml": [template]})
    with pytest.raises(StoryDataError, match=r"shape_of names 'wp99', which no loaded story file holds"):
        check_references({"b.yaml": [retold]})
    (other,) = parse({**GOOD, "id": "wp99_s2", "shape_of": "wp99", "expression": "boxes - per_box"})
    with pytest.raises(StoryDataError, match=r"entry 1 \(wp99_s2\): the expression 'boxes - per_box' is not the "):
        check_references({"a.yaml": [template], "b.yaml": [other]})


def test_an_unknown_story_file_is_named():
    with pytest.raises(StoryDataError, match=r"stories/four_ops.yaml: no such story file"):
        load_stories("four_ops")


def test_the_story_files_are_package_data():
    """Found through importlib.resources, as an installed package finds them (tests/test_packaging.py checks that
    the built wheel carries them and that the package unpacked from it loads them)."""
    folder = resources.files("rapo_trl").joinpath("data", "stories")
    assert sorted(p.name for p in folder.iterdir() if p.name.endswith(".yaml")) == sorted(f"{f}.yaml" for f in FILES)


def test_a_key_written_twice_is_refused_not_overwritten():
    # A dropped "- " merges the next entry into this one: YAML keeps the later values and the first story is lost.
    text = """- id: wp97
  story: "{name} has {a} apples and buys {b} more. How many now?"
  variables: {a: [2, 9], b: [2, 9]}
  expression: a + b
  id: wp98
  story: "{name} has {a} pears and eats {b}. How many are left?"
  variables: {a: [10, 20], b: [1, 9]}
  expression: a - b
"""
    with pytest.raises(StoryDataError, match="stories/test.yaml: .*'id' is written twice"):
        parse_stories(text, "stories/test.yaml")
    with pytest.raises(StoryDataError, match="'a' is written twice"):
        parse_stories(text.split("  id: wp98")[0].replace("b: [2, 9]", "a: [2, 9]"), "stories/test.yaml")
