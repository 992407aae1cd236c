"""Setups that would run but not train what was meant are named once, at start: a PEFT adapter at a full
fine-tuning learning rate, prompts that teach other tools than the trainer runs, a step whose tool calls all
failed."""

from __future__ import annotations

import logging

import pytest
from datasets import Dataset
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

from rapo_trl.tasks import to_rapo_rows
from rapo_trl.trainer.checks import warn_if_learning_rate_too_low_for_peft, warn_if_prompt_and_tools_differ
from tests.helpers.scripted import Turn
from tests.helpers.trainers import batch_inputs, rapo_trainer, script

LOGGER = "rapo_trl.trainer"


def warnings_of(caplog):
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]


def test_a_peft_adapter_below_1e_5_is_warned_about(tiny_model_dir, caplog):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj"]))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        warn_if_learning_rate_too_low_for_peft(peft_model, 1e-6)
        warn_if_learning_rate_too_low_for_peft(peft_model, 1e-4)
        warn_if_learning_rate_too_low_for_peft(AutoModelForCausalLM.from_pretrained(tiny_model_dir), 1e-6)
    (message,) = warnings_of(caplog)
    assert "learning_rate=1e-06" in message and "~1e-4" in message


@pytest.mark.parametrize("prompt_tools, running, expected", [
    (["python", "search"], ["python"], ["teach <search> but the trainer runs no search tool"]),
    (["python"], ["python", "search"], ["runs a <search> tool that the training prompts never mention"]),
    (["python"], ["python"], []),
    ([], ["python"], []),  # prompts without a tool protocol (a user's own format) are not second-guessed
])
def test_prompts_and_tools_must_agree(prompt_tools, running, expected, caplog):
    class Tag:
        timeout = 1.0

        def __init__(self, tag):
            self.tag = tag

    data = Dataset.from_list([{"question": "q?", "answer": "1"}])
    rows = to_rapo_rows(data, tools=[Tag(t) for t in prompt_tools]) if prompt_tools else to_rapo_rows(
        data, system_prompt="Answer briefly.")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        warn_if_prompt_and_tools_differ(rows, running)
    found = warnings_of(caplog)
    assert len(found) == len(expected) and all(e in m for e, m in zip(expected, found))


def test_a_step_whose_tool_calls_all_fail_is_warned_about_once(tiny_model_dir, tmp_path, caplog):
    trainer = rapo_trainer(tiny_model_dir, tmp_path)
    trainer.model.train()
    failing = [[Turn("<python>boom</python>", 2), Turn("<answer>7</answer><|im_end|>")]] * 4
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for _ in range(2):
            script(trainer, failing)
            trainer._generate_and_score_completions(batch_inputs())
    found = [m for m in warnings_of(caplog) if "tool call" in m]
    assert len(found) == 1 and "every tool call of the last step failed (4 calls)" in found[0]
    assert "<python>: Error" in found[0] and "boom happened" in found[0]


def test_a_step_with_one_working_tool_call_is_not_warned_about(tiny_model_dir, tmp_path, caplog):
    trainer = rapo_trainer(tiny_model_dir, tmp_path)
    trainer.model.train()
    mixed = [[Turn("<python>boom</python>", 2), Turn("<answer>7</answer><|im_end|>")]] * 3 + [
        [Turn("<python>1</python>", 2), Turn("<answer>7</answer><|im_end|>")]]
    script(trainer, mixed)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        trainer._generate_and_score_completions(batch_inputs())
    assert not [m for m in warnings_of(caplog) if "tool call" in m]
