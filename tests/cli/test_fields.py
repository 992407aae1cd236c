"""The recipe's fields read from source (for a help and errors without torch) are the dataclasses' own, and the
command line built from them takes exactly the options TRL's parser takes."""

from __future__ import annotations

import argparse
import dataclasses

import pytest
from trl import ModelConfig, TrlParser

from rapo_trl.cli import fields
from rapo_trl.cli.arguments import RAPOScriptArguments
from rapo_trl.cli.recipe import _conversion, _OneValue, recipe_parser
from rapo_trl.config import RAPOConfig


def real_fields() -> dict[str, fields.FieldSpec]:
    return (fields._from_dataclass(RAPOScriptArguments, fields.SCRIPT)
            | fields._from_dataclass(RAPOConfig, fields.TRAINING) | fields._from_dataclass(ModelConfig, fields.MODEL))


def converts(hint) -> dict:
    """`_conversion` with its converter named by what it makes of "3" and "none"."""
    def outcome(convert, text):
        try:
            return convert(text)
        except (ValueError, TypeError, argparse.ArgumentTypeError) as error:
            return type(error).__name__

    return {key: (outcome(value, "3"), outcome(value, "none")) if callable(value) else value
            for key, value in _conversion(hint).items()}


def test_fields_read_from_source_are_the_dataclasses_fields():
    static, real = fields.recipe_fields(), real_fields()
    assert list(static) == list(real)
    for name, spec in real.items():
        read = static[name]
        assert (read.dataclass, read.declared_in) == (spec.dataclass, spec.declared_in), name
        # an enum or config class reads as str: the same conversion on the command line
        assert converts(read.hint) == converts(spec.hint), name
        assert read.metadata.get("help") == spec.metadata.get("help"), name
        # TrainingArguments picks its default optimizer by torch version: unknown from source, so not shown wrong
        assert read.default == (fields.RUNTIME_DEFAULT if name == "optim" else spec.default), name


def test_unreadable_sources_fall_back_to_the_dataclasses(monkeypatch):
    """Should TRL or transformers restructure a config class, the fields still come (from the real classes)."""
    moved = (*fields.RAPO_CONFIG_SOURCES[:-1], ("transformers", "training_args.py", "MovedTrainingArguments"))
    monkeypatch.setattr(fields, "RAPO_CONFIG_SOURCES", moved)
    fields.recipe_fields.cache_clear()
    try:
        assert fields.recipe_fields().keys() == real_fields().keys()
        assert fields.recipe_fields()["seed"].declared_in == "TrainingArguments"
    finally:
        fields.recipe_fields.cache_clear()


@pytest.mark.parametrize("command", ["train", "eval", "build-store"])
def test_the_early_parser_takes_exactly_trls_options(command):
    """Every option TRL's parser takes is taken before TRL loads, and nothing else (but --config, --help-all)."""
    def options(parser):
        return {option for action in parser._actions for option in action.option_strings}

    trl = options(TrlParser((RAPOScriptArguments, RAPOConfig, ModelConfig)))
    assert options(recipe_parser(command)) - {"--config", "--help-all"} == trl


def test_every_help_group_names_real_fields():
    from rapo_trl.cli.recipe import HELP_GROUPS, help_groups

    for command in HELP_GROUPS:
        for title, names in help_groups(command):
            assert names and set(names) <= fields.recipe_fields().keys(), (command, title)


def test_recipe_fields_cover_every_init_field():
    for cls in (RAPOScriptArguments, RAPOConfig, ModelConfig):
        assert {f.name for f in dataclasses.fields(cls) if f.init} <= fields.recipe_fields().keys()


def test_a_field_that_takes_a_string_or_a_list_takes_several_values_early_as_in_trl():
    argv = ["--debug", "underflow_overflow", "tpu_metrics_debug"]
    early = recipe_parser("train").parse_known_args(argv)[0]
    parser = TrlParser((RAPOScriptArguments, RAPOConfig, ModelConfig))
    _, trained, _ = parser.parse_args_into_dataclasses(argv + ["--output_dir", "out", "--use_cpu", "true"])
    assert early.debug == ["underflow_overflow", "tpu_metrics_debug"]
    assert [str(d.value) for d in trained.debug] == early.debug


def test_the_early_parser_takes_several_values_exactly_where_trl_does():
    """`--report_to a b` passed the early checks, then TRL's parser (which reads report_to as one string) refused it
    as arguments not used, after TRL's import."""
    def several(parser):
        return {option for action in parser._actions for option in action.option_strings
                if action.nargs == "+" and not isinstance(action, _OneValue)}

    assert several(recipe_parser("train", everything=True)) == several(
        TrlParser((RAPOScriptArguments, RAPOConfig, ModelConfig)))


def test_several_trackers_are_refused_early_with_where_a_list_goes(tmp_path, capsys):
    from rapo_trl.cli import parse_recipe, read_recipe
    from tests.cli.conftest import write_yaml

    argv = ["--output_dir", str(tmp_path / "out"), "--report_to", "tensorboard", "none"]
    with pytest.raises(ValueError, match="not used by the HfArgumentParser"):  # `trl grpo` refuses them too
        TrlParser((RAPOScriptArguments, RAPOConfig, ModelConfig)).parse_args_into_dataclasses(argv)
    with pytest.raises(SystemExit):
        read_recipe("train", argv)
    said = capsys.readouterr().err
    assert "--report_to/--report-to: takes one value on the command line" in said
    assert "report_to: [tensorboard, none]" in said
    assert read_recipe("train", argv[:-1])[1].report_to == "tensorboard"
    config = write_yaml(tmp_path / "trackers.yaml", {"output_dir": str(tmp_path / "out"), "report_to": ["tensorboard"]})
    assert parse_recipe("train", ["--config", str(config)])[1].report_to == ["tensorboard"]
