"""Dynamic sampling (rapo_trl/trainer/dynamic_sampling.py): flat groups replaced within the step, consistently."""

from __future__ import annotations

import math

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

from rapo_trl.config import RAPOConfig
from rapo_trl.trainer import RAPOTrainer
from rapo_trl.trainer.dynamic_sampling import (
    PromptDraw,
    groups_with_signal,
    prompt_key,
    resample_flat_groups,
)
from rapo_trl.trainer.rewards import weighted_rewards
from tests.helpers.fakes import EchoTool
from tests.helpers.trainers import G, common_args

# --- the pieces, without a model ---


def test_a_group_has_signal_when_its_scored_rewards_differ():
    nan = math.nan
    rewards = torch.tensor([1.0, 1.0, 1.0, 1.0,  0.0, 1.0, 0.0, 0.0,  nan, 2.0, 2.0, nan,  nan, nan, nan, 3.0])
    assert groups_with_signal(rewards, 4).tolist() == [False, True, False, False]
    per_func = torch.tensor([[1.0, nan], [nan, nan], [0.5, 2.0]])
    weighted = weighted_rewards(per_func, torch.tensor([1.0, 0.5]))
    assert weighted[0] == 1.0 and math.isnan(weighted[1]) and weighted[2] == 1.5  # every function None: unscored


def _prompt(i):
    return [{"role": "user", "content": f"Compute {i}"}]


def test_prompt_draw_is_seeded_avoids_the_steps_prompts_and_repeats_only_when_it_must():
    data = Dataset.from_list([{"prompt": _prompt(i), "answer": str(i)} for i in range(20)])
    draw = PromptDraw(data, seed=3)
    first = draw(5, step=2, process=0, round_=1, exclude=set())
    assert first == draw(5, step=2, process=0, round_=1, exclude=set())  # reproducible
    assert first != draw(5, step=2, process=0, round_=2, exclude=set())
    assert first != draw(5, step=2, process=1, round_=1, exclude=set())
    assert first != draw(5, step=3, process=0, round_=1, exclude=set())
    exclude = {prompt_key(_prompt(i)) for i in range(15)}
    assert {row["answer"] for row in draw(5, step=0, process=0, round_=1, exclude=exclude)} == {"15", "16", "17", "18",
                                                                                                "19"}
    tiny = PromptDraw(data.select(range(2)), seed=0)
    assert len(tiny(3, step=0, process=0, round_=1, exclude={prompt_key(_prompt(0))})) == 3


def test_prompt_draw_takes_an_excluded_prompt_only_when_the_dataset_has_no_other():
    """Rows repeating an excluded prompt do not crowd out the others, and repeats are of the other prompts."""
    step_prompt = {prompt_key(_prompt(0))}
    repeated = Dataset.from_list([{"prompt": _prompt(0)}] * 9 + [{"prompt": _prompt(1)}])
    for step in range(20):
        assert PromptDraw(repeated, seed=0)(1, step=step, process=0, round_=1, exclude=step_prompt) == [
            {"prompt": _prompt(1)}]
    few = Dataset.from_list([{"prompt": _prompt(i)} for i in range(3)])
    for step in range(20):
        drawn = PromptDraw(few, seed=0)(3, step=step, process=0, round_=1, exclude=step_prompt)
        assert len(drawn) == 3 and _prompt(0) not in [row["prompt"] for row in drawn]
    only = Dataset.from_list([{"prompt": _prompt(0)}] * 2)
    assert PromptDraw(only, seed=0)(2, step=0, process=0, round_=1, exclude=step_prompt) == [{"prompt": _prompt(0)}] * 2


def _constant_reward(value):
    return lambda candidates, rows: torch.tensor([value(c) for c in candidates], dtype=torch.float32)


def test_flat_groups_are_replaced_by_candidates_with_signal_for_at_most_max_rounds():
    inputs = [{"prompt": _prompt(g)} for g in range(3) for _ in range(2)]
    rows = [f"row{g}.{j}" for g in range(3) for j in range(2)]
    rewards = torch.tensor([0.0, 0.0, 0.0, 1.0, 1.0, 1.0])  # groups 0 and 2 flat
    drawn_per_round = []
    flags_seen = []

    def draw(n, round_, exclude):
        assert prompt_key(_prompt(0)) in exclude  # never the step's own prompts
        drawn_per_round.append(n)
        return [{"prompt": _prompt(100 * round_ + k), "good": round_ == 2 and k == 0} for k in range(n)]

    def rollout(candidates, flags):
        flags_seen.append(flags)
        return [f"cand:{c['prompt'][0]['content']}:{i}" for i, c in enumerate(candidates)], None

    def score(candidates, candidate_rows):  # a candidate group has signal only if drawn "good"
        return torch.tensor([float(c["good"]) * (i % 2) for i, c in enumerate(candidates)])

    result = resample_flat_groups(rows, inputs, [True, False] * 3, rewards, 2, 3, draw, rollout, score,
                                  total_flat=lambda n: n)
    assert result.signal_before == [False, True, False]
    # round 1: both flat groups get a flat candidate; round 2: group 0's candidate has signal; round 3: group 2's not
    assert drawn_per_round == [2, 2, 1] and result.rounds == 3 and result.extra_rows == 10
    assert result.signal_after == [True, True, False]
    assert sorted(result.replaced) == [0, 1] and result.replaced[0]["prompt"] == _prompt(200)
    assert result.rows[:2] == ["cand:Compute 200:0", "cand:Compute 200:1"] and result.rows[2:] == rows[2:]
    assert flags_seen[0] == [True, False, True, False]  # each candidate keeps its flat group's hybrid rows


def test_every_process_runs_the_same_rounds_and_scores_even_without_flat_groups_of_its_own():
    """Another process still has flat groups: this one, with none, joins each round's scoring (TRL gathers)."""
    scored = []
    result = resample_flat_groups(["a", "b"], [{"prompt": "p"}] * 2, [False, False], torch.tensor([0.0, 1.0]), 2, 2,
                                  draw=lambda n, r, e: [{"prompt": f"q{r}"}] * n,
                                  rollout=lambda c, f: pytest.fail("nothing to roll out here"),
                                  score=lambda c, r: scored.append(len(r)) or torch.zeros(len(r)),
                                  total_flat=lambda n: n + 1)
    assert scored == [0, 0] and result.rounds == 2 and not result.replaced and result.signal_after == [True]
    nothing = resample_flat_groups(["a", "b"], [{"prompt": "p"}] * 2, [False, False], torch.tensor([0.0, 1.0]), 2, 2,
                                   draw=None, rollout=None, score=None, total_flat=lambda n: n)
    assert nothing.rounds == 0 and nothing.rows == ["a", "b"]


# --- in the trainer, on the tiny model ---

FLAT = "flat"
calls: list[dict] = []


def answer_reward(prompts, completions, answer, **kwargs):
    """0 for every row whose answer is FLAT; otherwise the completion's length (sampled text: it varies). Checks that
    each row's prompt and answer belong together, so a replacement scored with a stale answer fails here."""
    for prompt, value in zip(prompts, answer):
        assert prompt[-1]["content"].endswith(value.split(":")[-1]), (prompt, value)
    calls.append({"prompts": [p[-1]["content"] for p in prompts], "answer": list(answer)})
    return [0.0 if value.startswith(FLAT) else float(len(c[0]["content"])) for c, value in zip(completions, answer)]


def dataset(n=6, flat=(0,)):
    return Dataset.from_list([{"prompt": _prompt(i), "answer": f"{FLAT if i in flat else 'vary'}:{i}"}
                              for i in range(n)])


def trainer_for(tiny_model_dir, tmp_path, data, **kwargs):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    args = RAPOConfig(**common_args(tmp_path, max_completion_length=12, **kwargs), max_turn_tokens=12)
    trainer = RAPOTrainer(model, answer_reward, args=args, train_dataset=data, processing_class=tok,
                          tools=[EchoTool()])
    trainer.model.train()
    return trainer


def step(trainer, data, prompt_index):
    calls.clear()
    torch.manual_seed(0)
    inputs = [dict(data[prompt_index]) for _ in range(G)]
    return inputs, trainer._generate_and_score_completions(inputs)


def test_a_flat_group_is_replaced_and_scored_with_the_replacement_prompts_own_answer(tiny_model_dir, tmp_path):
    data = dataset()
    trainer = trainer_for(tiny_model_dir, tmp_path, data, dynamic_sampling_max_rounds=2)
    inputs, batch = step(trainer, data, 0)

    replaced = trainer.last_rollout.replaced
    assert sorted(replaced) == list(range(G))
    new = replaced[0]["prompt"][-1]["content"]
    assert new != "Compute 0" and all(r["prompt"][-1]["content"] == new for r in replaced.values())
    # TRL's inputs (reward kwargs), the final scoring, the prompt ids and TRL's completions table all say the same
    assert [x["answer"] for x in inputs] == [f"vary:{new.split()[-1]}"] * G
    assert calls[-1]["prompts"] == [new] * G and calls[-1]["answer"] == [x["answer"] for x in inputs]
    prompt_text = trainer.processing_class.decode(batch["prompt_ids"][0][batch["prompt_mask"][0].bool()])
    assert new in prompt_text and "Compute 0" not in prompt_text
    assert [p[-1]["content"] for p in list(trainer._logs["prompt"])[-G:]] == [new] * G
    rows = trainer.last_rollout.rows
    assert torch.equal(batch["completion_ids"][0][: len(rows[0].completion_ids)], torch.tensor(rows[0].completion_ids))
    # the final batch's group carries signal, and the metrics say what happened
    assert batch["advantages"].abs().sum() > 0
    metrics = {name: values[-1] for name, values in trainer._metrics["train"].items()}
    assert metrics["dynamic_sampling/signal_share_before"] == 0.0
    assert metrics["dynamic_sampling/signal_share_after"] == 1.0
    assert metrics["dynamic_sampling/rounds"] == 1.0 and metrics["dynamic_sampling/extra_rollouts_per_group"] == G
    assert metrics["rapo/step_has_signal"] == 1.0 and metrics["frac_reward_zero_std"] == 0.0
    # the replacement group's tokens were rolled out in an extra round: counted, though TRL's counts start after
    assert metrics["dynamic_sampling/extra_completion_tokens"] == sum(len(r.completion_ids) for r in rows)


def test_groups_still_flat_after_the_last_round_are_kept(tiny_model_dir, tmp_path):
    data = dataset(flat=range(6))
    trainer = trainer_for(tiny_model_dir, tmp_path, data, dynamic_sampling_max_rounds=2)
    inputs, batch = step(trainer, data, 0)
    assert not trainer.last_rollout.replaced and [x["answer"] for x in inputs] == ["flat:0"] * G
    assert not batch["advantages"].abs().sum()
    metrics = {name: values[-1] for name, values in trainer._metrics["train"].items()}
    assert metrics["dynamic_sampling/rounds"] == 2.0 and metrics["dynamic_sampling/signal_share_after"] == 0.0
    assert metrics["rapo/step_has_signal"] == 0.0
    assert len({tuple(c["prompts"]) for c in calls}) == 3  # the step's prompt and two different draws


def test_off_by_default_and_on_without_flat_groups_it_changes_nothing(tiny_model_dir, tmp_path):
    assert RAPOConfig(output_dir=str(tmp_path), use_cpu=True).dynamic_sampling_max_rounds == 0
    data = dataset()
    trainers, batches, logged = [], [], []
    for on in (False, True):
        trainer = trainer_for(tiny_model_dir, tmp_path / str(on), data, dynamic_sampling_max_rounds=2 if on else 0)
        _, batch = step(trainer, data, 1)  # prompt 1: rewards vary
        trainers.append(trainer)
        batches.append(batch)
        logged.append({name for name in trainer._metrics["train"]})
        assert not trainer.last_rollout.replaced and trainer._metrics["train"]["rapo/step_has_signal"] == [1.0]
    for key in ("prompt_ids", "completion_ids", "advantages", "tool_mask"):
        assert torch.equal(batches[0][key], batches[1][key]), key
    assert not any(name.startswith("dynamic_sampling/") for name in logged[0])
    assert logged[1] - logged[0] == {name for name in logged[1] if name.startswith("dynamic_sampling/")}

    off = trainers[0]
    inputs, batch = step(off, data, 0)  # prompt 0 is flat: off, it stays
    assert [x["answer"] for x in inputs] == ["flat:0"] * G and not batch["advantages"].abs().sum()
    assert off._metrics["train"]["rapo/step_has_signal"] == [1.0, 0.0]


def test_training_steps_through_trls_loop_log_what_dynamic_sampling_did(tiny_model_dir, tmp_path):
    """TRL's own loop (sampler, buffering, shuffle, split into micro-batches) around replaced groups."""
    data = dataset(n=8, flat=range(4))
    trainer = trainer_for(tiny_model_dir, tmp_path, data, dynamic_sampling_max_rounds=3,
                          max_steps=2, per_device_train_batch_size=2, gradient_accumulation_steps=2)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "dynamic_sampling/rounds" in entry]
    # the sampler's first prompt varies; its second is flat and gets replaced in one round
    assert [e["dynamic_sampling/signal_share_before"] for e in logged] == [1.0, 0.0]
    assert [e["dynamic_sampling/rounds"] for e in logged] == [0.0, 1.0]
    assert [e["dynamic_sampling/signal_share_after"] for e in logged] == [e["rapo/step_has_signal"] for e in logged] \
        == [1.0, 1.0]
    assert any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters() if n in before)


def test_two_generations_of_one_optimizer_step_draw_different_replacements(tiny_model_dir, tmp_path):
    """steps_per_generation below gradient_accumulation_steps: one optimizer step trains two generation batches, each
    drawing at the same global step; the second must not draw the first one's replacement prompts again."""
    data = dataset(n=8, flat=(0, 2))
    trainer = trainer_for(tiny_model_dir, tmp_path, data, dynamic_sampling_max_rounds=1,
                          gradient_accumulation_steps=2, steps_per_generation=1)
    replacements = []
    for micro_step, prompt_index in enumerate((0, 2)):
        trainer._step = micro_step  # TRL's micro-step count: both generations fall in optimizer step 0
        step(trainer, data, prompt_index)
        assert trainer.state.global_step == 0 and sorted(trainer.last_rollout.replaced) == list(range(G))
        replacements.append(trainer.last_rollout.replaced[0]["answer"])
    assert replacements[0] != replacements[1], replacements
    trainer._step = 0  # the first generation's draw is the one a run without a second generation makes
    step(trainer, data, 0)
    assert trainer.last_rollout.replaced[0]["answer"] == replacements[0]
