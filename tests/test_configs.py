"""The shipped YAML recipes only use known fields with the right types."""

import re
from pathlib import Path

import pytest
import yaml
from trl import ModelConfig

from rapo_trl.cli import parse_recipe
from rapo_trl.cli.arguments import RAPOScriptArguments, check_config_types
from rapo_trl.config import RAPOConfig

CONFIGS = sorted((Path(__file__).parent.parent / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_recipe_fields_are_known_and_typed(path):
    check_config_types(yaml.safe_load(path.read_text()), (RAPOScriptArguments, RAPOConfig, ModelConfig))


def test_demo_recipe_parses_into_rapo_config():
    script, args, model = parse_recipe("train", ["--config", str(CONFIGS[0].parent / "demo_cpu.yaml")])
    assert isinstance(args, RAPOConfig) and args.num_hybrid_generations == args.num_generations // 2 and args.use_cpu
    assert script.task == "word_problems" and model.use_peft and model.lora_r == 16
    # the demo trains the comparison's first-ranked recipe (SFT on the store, then RAPO guiding only failed groups, the
    # stored plan learned) with GRPO from the same start beside it, and reports fresh questions of RL's own stories
    # and held-out stories; RL trains on stories the warm start never shows, the warm start on the demonstrated ones,
    # and the store holds RL's own questions (the paper's)
    assert script.sft_warmup_steps > 0 and script.sft_store_steps > 0 and script.grpo_same_rollouts
    assert args.retrieve_at == ["plan"] and args.retrieve_failed_groups_max_reward == 0.0
    assert args.retrieved_token_loss_weight > 0 and args.retrieved_token_shaping is None
    assert (script.demo_split, script.train_split, script.store_split) == ("demonstrated", "reward_only", "reward_only")
    assert script.eval_splits == ["reward_only_fresh", "heldout_stories"] and script.eval_size >= 64
    assert script.eval_difficulty == script.task_difficulty  # the yardstick asks the stories RL trains on
    # two questions x G rollouts per step, decoded together; one optimizer step over all their micro-batches, each
    # of rows of one group (their prompt runs once)
    rows = args.per_device_train_batch_size * args.gradient_accumulation_steps
    assert rows == 2 * args.num_generations and args.steps_per_generation == args.gradient_accumulation_steps
    assert args.num_generations % args.per_device_train_batch_size == 0


def test_type_check_names_the_bad_key():
    with pytest.raises(ValueError, match="max_steps"):
        check_config_types({"max_steps": "ten"}, (RAPOConfig,))
    with pytest.raises(ValueError, match="unknown key 'retrive_prob'"):
        check_config_types({"retrive_prob": 0.5}, (RAPOConfig,))


def test_the_docs_state_the_demo_recipes_questions_and_rollouts_per_step():
    """Every page describing the demo recipe's RL step gives its questions x rollouts (docs/demo.md once
    said 1 question where the recipe runs 2). benchmarks.md is left out: it also states older recipes."""
    recipe = yaml.safe_load((CONFIGS[0].parent / "demo_cpu.yaml").read_text())
    rows = recipe["per_device_train_batch_size"] * recipe["gradient_accumulation_steps"]
    questions, rollouts = rows // recipe["num_generations"], recipe["num_generations"]
    words = {"one": 1, "two": 2, "three": 3, "four": 4}
    root = CONFIGS[0].parent.parent
    found = []
    for page in ("README.md", "docs/demo.md", "docs/design.md"):
        text = (root / page).read_text()
        for count, per in re.findall(r"\b(\d+|one|two|three|four)\s+questions?\s+x\s+(?:G\s*=\s*)?(\d+)", text):
            found.append((page, int(words.get(count, count)), int(per)))
    assert {page for page, *_ in found} == {"README.md", "docs/demo.md", "docs/design.md"}, found
    assert [f for f in found if f[1:] != (questions, rollouts)] == [], (questions, rollouts)
