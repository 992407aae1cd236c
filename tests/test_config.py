"""RAPOConfig: RAPO's defaults and clear validation errors."""

import pytest

from rapo_trl.config import RAPOConfig


def make(**kwargs):
    return RAPOConfig(output_dir="unused", use_cpu=True, report_to="none", **kwargs)


def test_rapo_defaults():
    cfg = make(num_generations=16, per_device_train_batch_size=16)
    assert (cfg.loss_type, cfg.epsilon, cfg.epsilon_high, cfg.delta, cfg.beta) == ("dapo", 0.2, 0.28, 3.0, 0.0)
    assert cfg.num_hybrid_generations == 8 and cfg.retrieve_prob == 0.5
    assert cfg.retrieval_advantage_weight == 0.2 and cfg.importance_shaping_weight == 0.05
    assert cfg.max_tool_calls == 3 and cfg.step_entropy == "topk"
    assert cfg.advantage_baseline == "group"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_generations=4, num_hybrid_generations=5), "num_hybrid_generations"),
        (dict(retrieve_prob=1.5), "retrieve_prob"),
        (dict(retrieve_prob_final=1.5), "retrieve_prob_final"),
        (dict(step_entropy="mean"), "step_entropy"),
        (dict(importance_shaping_weight=-1.0), "importance_shaping_weight"),
        (dict(max_turn_tokens=0), "max_turn_tokens"),
        (dict(retrieved_token_shaping=0.0), r"retrieved_token_shaping must be a number > 0 or None, got 0\.0"),
        (dict(retrieved_token_shaping="none"), r"retrieved_token_shaping must be a number > 0 or None, got 'none'"),
        (dict(learning_rate=-1e-4), r"learning_rate must be >= 0\.0"),
        (dict(max_tool_result_chars=0), r"max_tool_result_chars must be >= 1"),
        (dict(dynamic_sampling_max_rounds=-1), "dynamic_sampling_max_rounds"),
        (dict(advantage_baseline="luffy"), r"advantage_baseline must be one of \('group', 'on_policy'\), got 'luffy'"),
        (dict(advantage_baseline="on_policy", scale_rewards="batch"), "needs scale_rewards='group'"),
        (dict(advantage_baseline="on_policy", multi_objective_aggregation="normalize_then_sum"),
         "multi_objective_aggregation='sum_then_normalize'"),
        # GRPOTrainer's cap on tool-calling turns: set for TRL, it would be replaced by RAPO's 3 calls unseen.
        (dict(max_tool_calling_iterations=10), r"max_tool_calling_iterations=10 is GRPOTrainer's cap .* Set "
                                              r"max_tool_calls instead"),
        # GRPOConfig allows None (generate to the model's max length); the rollout failed on it with a TypeError.
        (dict(max_completion_length=None), r"max_completion_length=None is not supported"),
        # GRPOTrainer's generation options RAPO's multi-turn rollout would drop unseen.
        (dict(vllm_structured_outputs_regex=r"\d+"), "never apply it"),
        (dict(use_transformers_continuous_batching=True), "use_transformers_continuous_batching"),
        (dict(use_transformers_paged=True), "use_transformers_continuous_batching"),
        (dict(cache_implementation="static"), r"cache_implementation='static' .* never applies it"),
        # Refused before the model and TRL's vLLM engine (a server connection, up to 240 s) load.
        (dict(use_vllm=True, vllm_mode="server"), r"colocate mode only .*vllm_mode='server'"),
        (dict(use_vllm=True, vllm_tensor_parallel_size=2), "vllm_tensor_parallel_size=1"),
    ],
)
def test_invalid_values_name_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make(**kwargs)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        # GRPOConfig alone divides by it ("integer modulo by zero") or, at 1, names no field RAPO adds.
        (dict(num_generations=0), r"^num_generations must be >= 2 .*got 0\.$"),
        (dict(num_generations=1, per_device_train_batch_size=1), r"^num_generations must be >= 2 .*got 1\.$"),
        (dict(num_generations=-2), r"^num_generations must be >= 2 .*got -2\.$"),
        # GRPOConfig accepts these; the rollout would fail only after the model has loaded.
        (dict(max_completion_length=-5), r"^max_completion_length must be >= 1, got -5\.$"),
        (dict(max_completion_length=0), r"^max_completion_length must be >= 1, got 0\.$"),
        # 0 tool calls is allowed, so the message says ">= 0", not "positive".
        (dict(max_tool_calls=-1), r"^max_tool_calls must be >= 0 .*got -1\.$"),
    ],
)
def test_group_and_budget_sizes_are_checked_before_grpo_config(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make(**kwargs)


def test_zero_tool_calls_is_allowed():
    assert make(num_generations=2, per_device_train_batch_size=2, max_tool_calls=0).max_tool_calls == 0


def test_dynamic_sampling_is_off_by_default_and_takes_whole_groups_per_process():
    assert make(num_generations=2, per_device_train_batch_size=2).dynamic_sampling_max_rounds == 0
    cfg = make(dynamic_sampling_max_rounds=2, num_generations=8, per_device_train_batch_size=1,
               gradient_accumulation_steps=8)
    assert cfg.dynamic_sampling_max_rounds == 2


def test_dynamic_sampling_refuses_groups_that_straddle_processes(monkeypatch):
    """Two processes of 2 rows each: GRPO accepts the global batch of 4 = G, but each process would hold half a
    group, which dynamic sampling could not replace. (The world size is set: one process runs the tests.)"""
    monkeypatch.setattr(RAPOConfig, "world_size", property(lambda self: 2))
    assert make(num_generations=4, per_device_train_batch_size=2).generation_batch_size == 4
    with pytest.raises(ValueError, match=r"per_device_train_batch_size \* steps_per_generation \(2\) must be a "
                                         r"multiple of num_generations \(4\)"):
        make(dynamic_sampling_max_rounds=2, num_generations=4, per_device_train_batch_size=2)
