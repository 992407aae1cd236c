"""Setups that would run but not train what was meant are named once, at start: a PEFT adapter at a full
fine-tuning learning rate, prompts that teach other tools than the trainer runs, a step whose tool calls all
failed."""

from __future__ import annotations

import logging

import pytest
import torch
from datasets import Dataset
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer

from rapo_trl.tasks import to_rapo_rows
from rapo_trl.trainer.checks import (
    warn_if_learning_rate_too_low_for_peft,
    warn_if_nothing_to_retrieve,
    warn_if_options_ignored,
    warn_if_prompt_and_tools_differ,
    warn_on_lost_signal,
)
from tests.helpers.fakes import EchoTool
from tests.helpers.scripted import Turn
from tests.helpers.trainers import (
    batch_inputs,
    common_args,
    dataset,
    loss_and_grads,
    rapo_trainer,
    script,
    sevens,
)

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


def unit_price(total: float, count: int) -> float:
    """Price of one unit.

    Args:
        total: the total price.
        count: how many units.
    """
    return total / count


@pytest.mark.parametrize("prompt_tools, running, expected", [
    (["python", "search"], ["python"], ["teach <search> but the trainer runs no search tool"]),
    (["python"], ["python", "search"], ["runs a <search> tool that the training prompts never mention"]),
    (["python"], ["python"], []),
    ([], ["python"], ["runs <python>, but the training prompts teach no tool tag"]),  # TRL's prompt-only format
    ([], [], []),
    (["python", unit_price], ["python"], ["teach <unit_price> but the trainer runs no unit_price tool"]),
    (["python"], ["python", "unit_price"], ["runs a <unit_price> tool that the training prompts never mention"]),
    (["python", unit_price], ["python", "unit_price"], []),
    ([unit_price], ["unit_price"], []),
])
def test_prompts_and_tools_must_agree(prompt_tools, running, expected, caplog):
    class Tag:
        timeout = 1.0

        def __init__(self, tag):
            self.tag = tag

    data = Dataset.from_list([{"question": "q?", "answer": "1"}])
    tools = [Tag(t) if isinstance(t, str) else t for t in prompt_tools]
    rows = to_rapo_rows(data, tools=tools) if prompt_tools else Dataset.from_list(
        [{"prompt": [{"role": "user", "content": "q?"}], "solution": "1"}])
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


class OneOfTwoProcesses:
    """Process ``index`` of two; the other process's rows made ``other_calls`` tool calls, none failed."""

    device = torch.device("cpu")
    num_processes = 2

    def __init__(self, index: int, other_calls: int):
        self.process_index, self.is_main_process, self.other_calls = index, index == 0, other_calls

    def gather(self, tensor):
        other = torch.full_like(tensor, self.other_calls) if tensor.numel() == 1 else torch.zeros_like(tensor)
        return torch.cat([tensor, other])


@pytest.mark.parametrize("index", [0, 1])
def test_tool_failures_are_judged_over_every_processs_rows_and_said_once(index, caplog, monkeypatch):
    """Two processes: this one's two calls failed, the other's two worked, so not every call of the step failed;
    and the warnings due (three flat steps here) are said by the main process only, not once per process."""
    from rapo_trl.rollout import RolloutRow
    from rapo_trl.signal_monitor import SignalMonitor

    monkeypatch.setattr("accelerate.utils.gather_object", lambda errors: list(errors))  # the other has none
    rows = [RolloutRow([1], completion_ids=[5], tool_calls=1) for _ in range(2)]
    for row in rows:
        row.tool_errors.append(("python", "Error: boom"))
    monitor = SignalMonitor(patience=3)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for _ in range(3):
            warn_on_lost_signal(monitor, rows, torch.zeros(4), 4, OneOfTwoProcesses(index, other_calls=2))
    said = warnings_of(caplog)
    assert not [m for m in said if "tool call" in m]
    assert len([m for m in said if "equal for 3 steps" in m]) == (1 if index == 0 else 0)


def test_a_step_with_one_working_tool_call_is_not_warned_about(tiny_model_dir, tmp_path, caplog):
    trainer = rapo_trainer(tiny_model_dir, tmp_path)
    trainer.model.train()
    mixed = [[Turn("<python>boom</python>", 2), Turn("<answer>7</answer><|im_end|>")]] * 3 + [
        [Turn("<python>1</python>", 2), Turn("<answer>7</answer><|im_end|>")]]
    script(trainer, mixed)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        trainer._generate_and_score_completions(batch_inputs())
    assert not [m for m in warnings_of(caplog) if "tool call" in m]


def _retrieving(**settings):
    from rapo_trl.config import RAPOConfig

    return RAPOConfig(output_dir="unused", use_cpu=True, report_to="none", num_generations=4,
                      per_device_train_batch_size=4, **{"num_hybrid_generations": 2, **settings})


@pytest.mark.parametrize("settings, tool_tags, expected", [
    ({"retrieve_prob": 0.0, "retrieve_prob_final": 0.5}, ["python"], "no trace_store was given"),  # a ramp up
    ({"retrieve_prob": 0.0}, ["python"], None),
    ({"retrieve_prob": 0.5}, [], "the trainer runs no tool, so no row ever retrieves"),
    ({"retrieve_prob": 0.5, "retrieve_at": ["first_tool_step"]}, [], "the trainer runs no tool"),
    ({"retrieve_prob": 0.5, "retrieve_at": ["plan"]}, [], None),
    ({"retrieve_prob": 0.5}, None, None),  # TRL's JSON tools: not this check's to judge
    # Every call past max_tool_calls gets the limit notice, which is no tool step: with 0 no row reaches one.
    ({"retrieve_prob": 0.5, "max_tool_calls": 0}, ["python"], "max_tool_calls=0 runs no tool call"),
    ({"retrieve_prob": 0.5, "max_tool_calls": 0}, None, "max_tool_calls=0 runs no tool call"),
    ({"retrieve_prob": 0.5, "max_tool_calls": 0, "retrieve_at": ["start"]}, ["python"], None),
])
def test_retrieval_that_can_never_happen_is_named(settings, tool_tags, expected, caplog):
    store = [object()]  # a store with one record: no store warning of its own
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        warn_if_nothing_to_retrieve(_retrieving(retrieve_own_question=False, **settings),
                                    None if "retrieve_prob_final" in settings else store, tool_tags=tool_tags)
    found = warnings_of(caplog)
    assert [expected in m for m in found] == ([True] if expected else []), found


@pytest.mark.parametrize("settings, protocol, expected", [
    ({"retrieved_token_credit": "stored_reward"}, "tags", "retrieved_token_credit='stored_reward' set, but "
                                                           "retrieved_token_loss_weight is 0"),
    ({"retrieved_token_shaping": None}, "tags", "retrieved_token_shaping=None set, but retrieved_token_loss_weight is 0"),
    ({"retrieved_token_credit": "stored_reward", "retrieved_token_loss_weight": 1.0}, "tags", None),
    ({"retrieved_token_shaping": None, "retrieved_token_loss_weight": 1.0}, "tags", None),
    ({}, "tags", None),
    # JSON tool calls: reward functions get chat messages, which never hold a retrieved block.
    ({"score_retrieved_blocks": True}, "json", "score_retrieved_blocks=True, but with JSON tool calls"),
    ({"score_retrieved_blocks": True}, "tags", None),
])
def test_options_the_setup_leaves_without_effect_are_named(settings, protocol, expected, caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        warn_if_options_ignored(_retrieving(**settings), protocol, store=[object()])
    found = warnings_of(caplog)
    assert [expected in m for m in found] == ([True] if expected else []), found


RECIPE_RETRIEVAL_OPTIONS = dict(
    retrieve_at=["plan"], retrieve_failed_groups_max_reward=0.0, retrieve_prob=1.0, retrieve_own_question=True,
    retrieved_token_loss_weight=2.0, retrieved_token_shaping=None, retrieval_advantage_weight=0.5,
    importance_shaping_weight=0.1, step_entropy="full", score_retrieved_blocks=True,
)
"""A recipe's retrieval-only options away from their defaults (the demo recipe's, and more)."""


@pytest.mark.parametrize("settings, store, why_off", [
    ({"num_hybrid_generations": 0}, [object()], "retrieval is off (num_hybrid_generations=0)"),
    ({"retrieve_prob": 0.0, "retrieve_prob_final": 0.0}, [object()],
     "retrieval is off (retrieve_prob=0.0 and retrieve_prob_final=0.0)"),
    ({}, None, "retrieval is off (no trace_store was given)"),
])
def test_retrieval_only_options_are_named_while_retrieval_is_off(settings, store, why_off, caplog):
    options = {"retrieve_own_question": True, "retrieved_token_shaping": None, "retrieve_at": ["plan"]}
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        warn_if_options_ignored(_retrieving(**options, **settings), "tags", store)
    (message,) = warnings_of(caplog)  # one warning, which covers the weight-0 shaping too
    assert why_off in message
    assert "retrieve_own_question=True, retrieve_at=['plan'], retrieved_token_shaping=None" in message
    assert "retrieve_prob_final" not in message.split("have no effect")[1]  # a switch is a reason, never ignored


def test_retrieval_only_options_at_their_defaults_say_nothing_while_retrieval_is_off(caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        warn_if_options_ignored(_retrieving(num_hybrid_generations=0, retrieve_prob=0.0), "tags", None)
    assert warnings_of(caplog) == []


def test_a_trainer_without_retrieval_names_the_retrieval_options_it_ignores(tiny_model_dir, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        rapo_trainer(tiny_model_dir, tmp_path, num_hybrid_generations=0, retrieve_own_question=True,
                     retrieved_token_loss_weight=2.0)
    (message,) = [m for m in warnings_of(caplog) if "retrieval is off" in m]
    assert "(num_hybrid_generations=0 and no trace_store was given)" in message
    assert "retrieve_own_question=True, retrieved_token_loss_weight=2.0" in message


def _recipe(tmp_path):
    from rapo_trl.config import RAPOConfig

    return RAPOConfig(**common_args(tmp_path), max_turn_tokens=32, **RECIPE_RETRIEVAL_OPTIONS)


def _trainer(tiny_model_dir, args):
    from rapo_trl.trainer import RAPOTrainer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    return RAPOTrainer(model, sevens, args=args, train_dataset=dataset(), processing_class=tok, trace_store=None,
                       tools=[EchoTool()])


def test_the_grpo_baseline_of_a_retrieving_recipe_warns_of_nothing_ignored(tiny_model_dir, tmp_path, caplog):
    from rapo_trl.cli.grpo_baseline import grpo_baseline_args

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        _trainer(tiny_model_dir, grpo_baseline_args(_recipe(tmp_path), steps=1))
    assert not [m for m in warnings_of(caplog) if "no effect" in m]


def test_the_grpo_baseline_computes_what_it_did_with_the_recipes_retrieval_options(tiny_model_dir, tmp_path):
    # The baseline resets the retrieval-only options to their defaults: its step must be the one it computed with the
    # recipe's values and retrieval off, to the bit.
    from rapo_trl.cli.grpo_baseline import RETRIEVAL_OFF, grpo_baseline_args
    from rapo_trl.cli.trainer_build import with_values

    recipe = _recipe(tmp_path)
    steps = []
    for args in (with_values(recipe, **RETRIEVAL_OFF), grpo_baseline_args(recipe, steps=1)):
        torch.manual_seed(0)
        trainer = _trainer(tiny_model_dir, args)
        script(trainer)
        batch = trainer._generate_and_score_completions(batch_inputs())
        steps.append((batch["advantages"], *loss_and_grads(trainer, batch)))
    (advantages, loss, grads), (reset_advantages, reset_loss, reset_grads) = steps
    assert torch.equal(advantages, reset_advantages) and advantages.abs().sum() > 0
    assert torch.equal(loss, reset_loss)
    assert grads.keys() == reset_grads.keys() and all(torch.equal(grads[n], reset_grads[n]) for n in grads)


QUESTIONS = Dataset.from_dict({"question": [f"How many apples are left when {n} of {n + 9} are eaten?" for n in range(6)],
                               "answer": ["9"] * 6})
TRAJECTORY = "<think>Subtract.</think>\n<python>\nprint(9)\n</python>\n<result>\n9\n</result>\n<answer>\\boxed{9}</answer>"


def _store_from(tmp_path, rows, **config):
    from rapo_trl.embeddings import HashingEmbedder
    from rapo_trl.store import StoreConfig, TraceStore

    store = TraceStore(tmp_path / "store", embedder=HashingEmbedder(64), config=StoreConfig(**config))
    store.add_trajectories([TRAJECTORY] * len(rows), [1.0] * len(rows), rows["question_id"], prompts=rows["prompt"],
                           keep_top_k=None)
    return store


@pytest.mark.parametrize("store_form, training_form, cut, warned", [
    ("conversation", "plain", False, "every training prompt begins with the same instructions"),
    ("plain", "conversation", False, "every first-step key of the store begins with the same instructions"),
    ("conversation", "plain", True, None),  # StoreConfig(system_prompt=...) cuts them from the queries
    ("plain", "plain", False, None),
    ("conversation", "conversation", False, None),
])
def test_a_store_keyed_from_prompts_of_another_form_is_named(tmp_path, caplog, store_form, training_form, cut, warned):
    from rapo_trl.tasks import system_prompt_for
    from rapo_trl.tools import PythonTool

    def rows(form):
        return to_rapo_rows(QUESTIONS, tools=[PythonTool()], conversational=form == "conversation")

    system = system_prompt_for([PythonTool()])
    store = _store_from(tmp_path, rows(store_form), **({"system_prompt": system} if cut else {}))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        warn_if_nothing_to_retrieve(_retrieving(retrieve_prob=0.5), store, rows(training_form), tool_tags=["python"])
    found = warnings_of(caplog)
    assert [warned in m for m in found] == ([True] if warned else []), found
    if warned:
        assert "StoreConfig(system_prompt=<the instructions>)" in found[0]


def test_a_push_that_cannot_happen_is_refused_before_the_model_loads(tmp_path, monkeypatch):
    from huggingface_hub import constants

    from rapo_trl.config import RAPOConfig
    from rapo_trl.rewards import rapo_outcome_reward
    from rapo_trl.trainer import RAPOTrainer
    from tests.helpers.trainers import common_args, dataset

    settings = dict(common_args(tmp_path), push_to_hub=True, hub_model_id="me/model")
    with pytest.raises(ValueError, match="push_to_hub needs the Hub, but HF_HUB_OFFLINE is set"):
        RAPOTrainer("no/such-model", rapo_outcome_reward, args=RAPOConfig(**settings), train_dataset=dataset())
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no saved login
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with pytest.raises(ValueError, match=r"needs a Hugging Face token.*trainer\.push_to_hub\(\)"):
        RAPOTrainer("no/such-model", rapo_outcome_reward, args=RAPOConfig(**settings), train_dataset=dataset())


def test_a_frozen_adapter_is_refused_before_training(tiny_model_dir, tmp_path):
    """PeftModel.from_pretrained loads an adapter frozen (is_trainable=False): training would log losses and a zero
    grad_norm and change nothing. train() refuses it in one line naming the fix; a trainable adapter trains."""
    from peft import PeftModel

    from rapo_trl.config import RAPOConfig
    from rapo_trl.trainer import RAPOTrainer
    from tests.helpers.fakes import EchoTool
    from tests.helpers.trainers import common_args, dataset, sevens

    adapter = tmp_path / "adapter"
    get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir), LoraConfig(r=4, target_modules=["q_proj"])
                   ).save_pretrained(adapter)
    for trainable in (False, True):
        model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), adapter,
                                          is_trainable=trainable)
        args = RAPOConfig(**common_args(tmp_path / str(trainable), max_steps=1, max_completion_length=8),
                          max_turn_tokens=8)
        trainer = RAPOTrainer(model, sevens, args=args, train_dataset=dataset(), tools=[EchoTool()],
                              processing_class=AutoTokenizer.from_pretrained(tiny_model_dir))
        if trainable:
            trainer.train()
            assert trainer.state.global_step == 1
        else:
            with pytest.raises(ValueError, match="no trainable parameter.*is_trainable=True"):
                trainer.train()
