"""RAPOTrainer on a TRL environment (``environment_factory``) and on JSON tools (``tools=[fn]``): with retrieval off
it matches GRPOTrainer running its own tool loop on the same environment (ids, masks, rewards, loss, gradients); with
retrieval on, retrieved steps and the retrieval metrics show."""

from __future__ import annotations

import copy
import logging

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from rapo_trl.config import RAPOConfig
from rapo_trl.trainer import RAPOTrainer
from tests.helpers.environments import Counter, SqliteCounter, call, multiply
from tests.helpers.fakes import FixedStore
from tests.helpers.scripted import ScriptedGenerate, Turn
from tests.helpers.trainers import G, assert_same_update, batch_inputs, common_args, dataset, loss_and_grads

SCRIPTS = [
    [call("add", "Adding two.", n=2), call("add", n=3), "The total is 5.<|im_end|>"],
    [call("add", n=1), "The total is 1.<|im_end|>"],
    [call("explode"), "It broke.<|im_end|>"],
    ['No tools. <tool_call>\n{"name": "add", "arguments": {"n": 9</tool_call><|im_end|>'],
]


class Recorder:
    """A reward that counts tool results in the completion and keeps what it was given."""

    __name__ = "tool_results"

    def __init__(self):
        self.seen = []

    def __call__(self, completions, environments=None, **kwargs):
        self.seen.append((copy.deepcopy(completions), [type(e).__name__ for e in environments or []]))
        return [float(sum(m["role"] == "tool" for m in c)) for c in completions]


def _script(trainer, scripts=SCRIPTS):
    model = trainer.accelerator.unwrap_model(trainer.model)
    scripted = ScriptedGenerate(trainer.processing_class, [([], [Turn(t) for t in turns]) for turns in scripts],
                                model.config.vocab_size)
    if isinstance(trainer, RAPOTrainer):
        model.generate = scripted
    else:  # TRL's own turns read the generated ids as a tensor
        model.generate = lambda **kwargs: scripted(**kwargs).sequences


def _settings(tmp_path, **kwargs):
    return common_args(tmp_path, **{"max_completion_length": 256, **kwargs})


def _rapo(tiny_model_dir, tmp_path, store=None, reward=None, max_completion_length=256, environment_factory=Counter,
          **kwargs):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    args = RAPOConfig(**_settings(tmp_path, max_completion_length=max_completion_length), max_turn_tokens=128,
                      **kwargs)
    return RAPOTrainer(AutoModelForCausalLM.from_pretrained(tiny_model_dir), reward or Recorder(), args=args,
                       train_dataset=dataset(), processing_class=tok, trace_store=store,
                       environment_factory=environment_factory)


def _step(trainer):
    _script(trainer)
    trainer.model.train()
    batch = trainer._generate_and_score_completions(batch_inputs())
    return batch, *loss_and_grads(trainer, batch)


def test_retrieval_off_matches_grpo_trainer_on_the_environment(tiny_model_dir, tmp_path):
    rapo_reward, grpo_reward = Recorder(), Recorder()
    rapo = _rapo(tiny_model_dir, tmp_path / "rapo", reward=rapo_reward, retrieve_prob=0.0)
    rapo_batch, rapo_loss, rapo_grads = _step(rapo)

    grpo = GRPOTrainer(AutoModelForCausalLM.from_pretrained(tiny_model_dir), grpo_reward,
                       args=GRPOConfig(**_settings(tmp_path / "grpo")), train_dataset=dataset(),
                       processing_class=AutoTokenizer.from_pretrained(tiny_model_dir), environment_factory=Counter)
    grpo_batch, grpo_loss, grpo_grads = _step(grpo)

    assert rapo.tool_protocol == "json"
    assert torch.equal(rapo_batch["prompt_ids"], grpo_batch["prompt_ids"])
    assert torch.equal(rapo_batch["completion_ids"], grpo_batch["completion_ids"])
    assert torch.equal(rapo_batch["completion_mask"], grpo_batch["completion_mask"])
    assert torch.equal(rapo_batch["tool_mask"], grpo_batch["tool_mask"])
    assert rapo_reward.seen == grpo_reward.seen  # the same chat messages, the same environments
    assert [e.total for e in rapo.environments] == [e.total for e in grpo.environments] == [5, 1, 0, 0]
    assert_same_update(rapo_batch, grpo_batch, rapo_loss, grpo_loss, rapo_grads, grpo_grads)
    metrics = rapo._metrics["train"]
    assert metrics["tools/call_frequency"][-1] == pytest.approx(4 / G)  # three calls run, one did not parse
    assert metrics["tools/failure_frequency"][-1] == pytest.approx(1 / 4)
    assert metrics["tools/call_frequency"][-1] == grpo._metrics["train"]["tools/call_frequency"][-1]


def test_environment_reward_and_retrieval_metrics(tiny_model_dir, tmp_path):
    stored = call("add", "Stored.", n=1).replace("<|im_end|>", "") + "\n<result>\n1\n</result>"
    rapo = _rapo(tiny_model_dir, tmp_path, store=FixedStore(text=stored), retrieve_prob=1.0,
                 num_hybrid_generations=2, max_completion_length=512)
    batch, loss, _ = _step(rapo)
    rows = rapo.last_rollout.rows
    assert [len(r.retrievals) for r in rows] == [2, 1, 0, 0]  # after each tool step of the hybrid rows (0 and 1)
    assert rapo.reward_func_names == ["tool_results", "Counter"]  # get_reward, as TRL adds it
    assert [e.total for e in rapo.environments] == [5, 1, 0, 0]  # a retrieved call never runs
    metrics = rapo._metrics["train"]
    for name in ("rapo/retrieval_rate", "rapo/retrieved_fraction", "rapo/z_mean", "rapo/f_ret_mean"):
        assert name in metrics, name
    assert metrics["rapo/retrieval_rate"][-1] == 1.0
    tool_mask = batch["tool_mask"]
    for i, row in enumerate(rows):
        for event in row.retrievals:
            assert tool_mask[i, event.start:event.end].sum() == 0
    assert torch.isfinite(loss)


def test_scoring_retrieved_blocks_with_json_tools_is_named_as_reaching_completion_ids_only(tiny_model_dir, tmp_path,
                                                                                          caplog):
    stored = call("add", "Stored.", n=1).replace("<|im_end|>", "") + "\n<result>\n1\n</result>"
    reward = Recorder()
    with caplog.at_level(logging.WARNING, logger="rapo_trl.trainer"):
        rapo = _rapo(tiny_model_dir, tmp_path, store=FixedStore(text=stored), reward=reward, retrieve_prob=1.0,
                     num_hybrid_generations=2, max_completion_length=512, score_retrieved_blocks=True)
    assert any("score_retrieved_blocks=True, but with JSON tool calls" in r.getMessage() for r in caplog.records)
    _step(rapo)
    assert [len(r.retrievals) for r in rapo.last_rollout.rows][:2] != [0, 0]
    completions, _ = reward.seen[-1]
    assert not any("Stored." in str(m.get("content")) for c in completions for m in c)  # what the warning says


def test_thread_bound_environment_runs_on_the_trainers_thread_as_in_grpo_trainer(tiny_model_dir, tmp_path, caplog):
    # On worker threads (the default) every call to the sqlite-backed environment fails, and the warning names the
    # option.
    threaded = _rapo(tiny_model_dir, tmp_path / "threaded", retrieve_prob=0.0, environment_factory=SqliteCounter)
    with caplog.at_level(logging.WARNING, logger="rapo_trl.trainer"):
        _step(threaded)
    assert [e.total for e in threaded.environments] == [0, 0, 0, 0]
    assert threaded._metrics["train"]["tools/failure_frequency"][-1] == 1.0
    assert any("json_tool_timeout=None" in record.message for record in caplog.records)

    rapo_reward, grpo_reward = Recorder(), Recorder()
    rapo = _rapo(tiny_model_dir, tmp_path / "rapo", reward=rapo_reward, retrieve_prob=0.0,
                 environment_factory=SqliteCounter, json_tool_timeout=None)
    rapo_batch, rapo_loss, rapo_grads = _step(rapo)
    grpo = GRPOTrainer(AutoModelForCausalLM.from_pretrained(tiny_model_dir), grpo_reward,
                       args=GRPOConfig(**_settings(tmp_path / "grpo")), train_dataset=dataset(),
                       processing_class=AutoTokenizer.from_pretrained(tiny_model_dir), environment_factory=SqliteCounter)
    grpo_batch, grpo_loss, grpo_grads = _step(grpo)

    assert [e.total for e in rapo.environments] == [e.total for e in grpo.environments] == [5, 1, 0, 0]
    assert torch.equal(rapo_batch["completion_ids"], grpo_batch["completion_ids"])
    assert rapo_reward.seen == grpo_reward.seen
    assert rapo._metrics["train"]["tools/failure_frequency"][-1] == pytest.approx(1 / 4)  # only "explode"
    assert_same_update(rapo_batch, grpo_batch, rapo_loss, grpo_loss, rapo_grads, grpo_grads)


def test_json_tools_without_environment_match_grpo_trainer(tiny_model_dir, tmp_path):
    scripts = [[call("multiply", a=6, b=7), "42<|im_end|>"]] * G
    batches, rewards = [], []
    for trainer_class, config_class in ((RAPOTrainer, RAPOConfig), (GRPOTrainer, GRPOConfig)):
        extra = {"max_turn_tokens": 128, "retrieve_prob": 0.0} if config_class is RAPOConfig else {}
        args = config_class(**_settings(tmp_path / trainer_class.__name__), **extra)
        rewards.append(Recorder())
        trainer = trainer_class(AutoModelForCausalLM.from_pretrained(tiny_model_dir), rewards[-1], args=args,
                                train_dataset=dataset(), processing_class=AutoTokenizer.from_pretrained(tiny_model_dir),
                                tools=[multiply])
        _script(trainer, scripts)
        trainer.model.train()
        batches.append(trainer._generate_and_score_completions(batch_inputs()))
    (rapo_batch, grpo_batch), (rapo_reward, grpo_reward) = batches, rewards
    # The prompt shows the tool's schema as GRPOTrainer renders it, though TRL's own tool loop is kept out of the step.
    assert torch.equal(rapo_batch["prompt_ids"], grpo_batch["prompt_ids"])
    prompt = AutoTokenizer.from_pretrained(tiny_model_dir).decode(rapo_batch["prompt_ids"][0])
    assert '"name": "multiply"' in prompt
    assert torch.equal(rapo_batch["completion_ids"], grpo_batch["completion_ids"])
    completions, _ = rapo_reward.seen[-1]
    assert [m["content"] for m in completions[0] if m["role"] == "tool"] == ["42"]
    assert rapo_reward.seen == grpo_reward.seen


def test_bad_setups_are_refused_clearly(tiny_model_dir, tmp_path):
    from tests.helpers.fakes import EchoTool

    with pytest.raises(ValueError, match="tool_protocol='json'"):
        _rapo(tiny_model_dir, tmp_path, tool_protocol="tags")
    with pytest.raises(ValueError, match="cannot be combined with environment_factory"):
        _rapo(tiny_model_dir, tmp_path, dynamic_sampling_max_rounds=2)
    with pytest.raises(ValueError, match="With JSON tool calls a hybrid rollout retrieves after tool steps only"):
        RAPOTrainer("no/such-model", Recorder(), args=RAPOConfig(**_settings(tmp_path), retrieve_at=["plan"]),
                    train_dataset=dataset(), environment_factory=Counter)  # refused before the model loads
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    with pytest.raises(ValueError, match="EchoTool is a tag tool"):
        RAPOTrainer(str(tiny_model_dir), Recorder(), args=RAPOConfig(**_settings(tmp_path), tool_protocol="json"),
                    train_dataset=dataset(), processing_class=tok, tools=[EchoTool()])



def test_store_growth_stores_the_best_rollouts_turns(tiny_model_dir, tmp_path):
    from rapo_trl.embeddings import HashingEmbedder
    from rapo_trl.store import TraceStore

    store = TraceStore(tmp_path / "store", embedder=HashingEmbedder(64))
    rapo = _rapo(tiny_model_dir, tmp_path / "out", store=store, retrieve_prob=0.0,
                 store_growth_min_reward=1.0)
    _step(rapo)
    stored = store.collection.get(include=["metadatas"])["metadatas"]
    # The group's best row (the environment's total 5, three tool results: reward 2 + 5) and its three turns.
    assert sorted(m["step_index"] for m in stored) == [0, 1, 2]
    assert {m["reward"] for m in stored} == {7.0} and {m["source"] for m in stored} == {"policy"}


class StartingCounter(Counter):
    """A ``Counter`` whose ``reset`` adds to the prompt, as a game's first board would."""

    def reset(self, **kwargs) -> str:
        super().reset(**kwargs)
        return " Start at 0."


def test_store_growth_keys_the_turns_by_the_prompt_the_environment_showed(tiny_model_dir, tmp_path):
    """The hybrid rollouts query the store with the prompt after ``reset`` (its observation appended), as
    ``build_from_environment`` keys its records: the grown records are keyed by that prompt too, not the row's."""
    from rapo_trl.embeddings import HashingEmbedder
    from rapo_trl.question_ids import question_id_of
    from rapo_trl.store import TraceStore

    store = TraceStore(tmp_path / "store", embedder=HashingEmbedder(64))
    rapo = _rapo(tiny_model_dir, tmp_path / "out", store=store, retrieve_prob=0.0, store_growth_min_reward=1.0,
                 environment_factory=StartingCounter)
    _step(rapo)
    stored = store.collection.get(include=["metadatas", "documents"])
    first = [d for m, d in zip(stored["metadatas"], stored["documents"]) if m["step_index"] == 0]
    assert first == [store.preprocess("Compute 0 Start at 0.\n")]  # the context the policy's first step had
    # the row's id is its question's, whatever reset showed: as build_from_environment and to_rapo_rows name it
    assert {metadata["question_id"] for metadata in stored["metadatas"]} == {question_id_of("Compute 0")}


def test_a_call_past_its_timeout_never_lands_on_a_later_rows_environment(tiny_model_dir, tmp_path):
    """TRL reuses a step's environments in later steps (reset, not rebuilt). A call past ``json_tool_timeout`` runs on
    in its thread: when it ends, it must change the environment of the row that made it, never the one a later step's
    row gets (whose reward would then count a call that row never made)."""
    import threading

    release, ended = threading.Event(), threading.Event()

    class Hanging(Counter):
        def add(self, n: int) -> int:
            """Add a number to the running total and return the total.

            Args:
                n: the number to add
            """
            release.wait(10)
            self.total += 100
            ended.set()
            return self.total

    def lets_the_late_call_end(completions, **kwargs):
        if rapo.state.global_step == 1:  # the second step: the first step's call ends while it is scored
            release.set()
            ended.wait(10)
        return [0.0] * len(completions)

    rapo = _rapo(tiny_model_dir, tmp_path, reward=lets_the_late_call_end, retrieve_prob=0.0,
                 environment_factory=Hanging, json_tool_timeout=0.2)
    rapo.model.train()
    _script(rapo, [[call("add", n=1), "Done.<|im_end|>"]] + [["Done.<|im_end|>"]] * (G - 1))
    rapo._generate_and_score_completions(batch_inputs())
    assert rapo.last_rollout.rows[0].tool_failures == 1  # timed out: the policy was shown the error
    rapo.state.global_step = 1
    _script(rapo, [["Done.<|im_end|>"]] * G)
    rapo._generate_and_score_completions(batch_inputs())
    assert ended.is_set()
    assert [e.total for e in rapo.environments] == [0] * G  # no row of this step called add
    assert rapo.last_rollout.rewards.tolist() == [0.0] * G
