"""Rollout throughput: RAPO's hybrid rollout engine against TRL's own multi-turn tool loop (issue 4).

Side by side in one process, on the same model object, prompts, batch, completion budget and sampling
(temperature 1.0, torch seeded identically before the matching runs of each path):

  A  TRL: a real ``GRPOTrainer`` built with ``tools=[python]`` (a plain function tool running the same
     sandboxed ``PythonTool``), timing ``trainer._generate(prompts)``: TRL's generate, JSON tool-call
     parsing and tool loop. Where TRL refuses the model's chat template for tools (SmolLM2's own
     template cannot render tool calls), the output says so (see the variants for what runs instead).
  A0 TRL's plain single-turn ``_generate`` (no ``tools=``), natural variant only: the same prompt tokens
     as B (A's prompts also carry TRL's JSON tool schema), so B/A0 is the engine's own overhead.
  B  RAPO: a ``RAPOTrainer`` with ``PythonTool``, a Chroma ``TraceStore`` (all-MiniLM-L6-v2) built from
     the arithmetic task's expert trajectories, hybrid rows (num_generations // 2 per group) and
     retrieve_prob 0.5, timing ``trainer._generate(prompts)``, which runs the hybrid rollout through
     ``rollout_func``. ``rollout_engine.last_stats`` splits its time into generate / tools / retrieval.

Variants:
  natural   the model as it is. The random tiny model never writes a tool call and SmolLM2 almost never
            does, so this measures the pure generation path (one turn) of both.
  scripted  tool-heavy: ``model.generate`` is wrapped with a logits processor that, in every turn of a
            row that has made fewer than ``--calls`` tool calls, lets the policy sample ``--free-tokens``
            tokens (EOS banned), then forces a tool call in the path's own format: RAPO's
            ``<python>CODE</python>`` (the engine stops on the closing tag) or TRL's
            ``<tool_call>{"name": "python", "arguments": {"code": CODE}}</tool_call><|im_end|>``. Every
            forced token still costs a real forward pass, as a real call would. After the last call the
            row samples freely to EOS or the budget. Both paths therefore make the same number of real
            sandboxed tool calls per row; RAPO's hybrid rows also retrieve after each call (p = 0.5).
            For SmolLM2, TRL's tool loop runs on a copy of its tokenizer with TRL's Qwen2.5 ChatML
            template (same <|im_start|>/<|im_end|> tokens), since SmolLM2's own template has no tools.

Policy tokens are completion tokens with mask 1 (TRL's ``tool_mask``, RAPO's ``env_mask``): sampled or
scripted-call tokens, never tool results or retrieved steps. Runs: one warm-up per path, then
``--repeats`` timed rounds, the path order reversed every round to cancel drift; rates are medians over
runs, B/A ratios medians over rounds of the within-round ratio. torch runs one intra-op thread by
default (``--threads``): on the shared, oversubscribed 2-core machine two OpenMP threads were 10-25x
slower than one.

The RAPO engine's transformers backend runs turns in a KV-cached sampling loop (``kv_decode.py``) unless
``model.generate`` is patched: the scripted variant above patches it, so there B runs the backend's
``generate``-per-turn path. ``--engine-vs-generate`` measures the cached loop itself, in its own block of
results/rollout.md (and results/rollout.json): SmolLM2 rollouts of the engine (tool-heavy rows scripted by
a logits processor that reads each row's own ids, so it works while rows leave the batch) against plain
``model.generate`` on the same rows sampling the same number of tokens, and against the engine with
``reuse_kv=False`` (one ``generate`` call per turn, the path before the cache).

    nice -n 5 .venv/bin/python benchmarks/bench_rollout.py            # default: ~12.5 min at load 4-7 on 2 cores
    nice -n 5 .venv/bin/python benchmarks/bench_rollout.py --engine-vs-generate --system-prompt full --ev-rows 4
    nice -n 5 .venv/bin/python benchmarks/bench_rollout.py --quick    # smoke run: ~2.5 min at load 4
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import io
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402
from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria  # noqa: E402

CALL_CODE = "print(sum(i * i for i in range(1000)))  # bench-call"
CALL_MARKER = "# bench-call"
RAPO_CALL = f"<python>\n{CALL_CODE}\n</python>"
RESULTS = Path(__file__).resolve().parent / "results"
# The shipped RAPO system prompt is ~370 SmolLM2 tokens; re-prefilled every turn it dominates a CPU rollout.
# ``--system-prompt short`` (default) keeps the same instructions in ~60 tokens.
SHORT_SYSTEM_PROMPT = (
    "Solve the problem step by step. To run Python, write code between <python> and </python>; its output "
    "comes back between <result> and </result>. Finish with <answer>\\boxed{...}</answer>."
)


# ----------------------------------------------------------------------------- machine


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info() -> dict:
    import transformers
    import trl

    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": f"{_cpu_model()}, {os.cpu_count()} cores (torch threads: {torch.get_num_threads()})",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


# ----------------------------------------------------------------------------- scripted tool calls


class ScriptedToolCalls(LogitsProcessor):
    """Per row: sample ``free`` tokens (EOS banned), then force ``call_ids``; rows without a plan are free."""

    def __init__(self, start: int, plans: list[list[int] | None], free: int, banned: list[int]):
        self.start, self.plans, self.free, self.banned = start, plans, free, banned

    def __call__(self, input_ids, scores):
        step = input_ids.shape[1] - self.start
        for row, plan in enumerate(self.plans):
            if plan is None:
                continue
            if step < self.free:
                scores[row, self.banned] = -float("inf")
            elif step - self.free < len(plan):
                token = plan[step - self.free]
                scores[row, :] = -float("inf")
                scores[row, token] = 0.0
        return scores


@contextlib.contextmanager
def scripted_generate(model, tokenizer, call_text: str, calls: int, free: int):
    """Wrap ``model.generate`` so every turn of a row with fewer than ``calls`` calls ends in a forced call."""
    call_ids = tokenizer(call_text, add_special_tokens=False)["input_ids"]
    banned = sorted({tokenizer.eos_token_id, *_as_list(model.generation_config.eos_token_id)} - {None})
    original = model.generate

    def generate(*args, **kwargs):
        input_ids = kwargs["input_ids"]
        texts = tokenizer.batch_decode(input_ids, skip_special_tokens=False)
        plans = [call_ids if text.count(CALL_MARKER) < calls else None for text in texts]
        processor = ScriptedToolCalls(input_ids.shape[1], plans, free, banned)
        kwargs["logits_processor"] = LogitsProcessorList([*(kwargs.get("logits_processor") or []), processor])
        return original(*args, **kwargs)

    model.generate = generate
    try:
        yield
    finally:
        del model.generate


def _as_list(value) -> list:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


# ----------------------------------------------------------------------------- tools and store


class TimedPythonFunction:
    """TRL's tool: a plain function (TRL reads name, signature and docstring) running the same sandbox."""

    def __init__(self):
        from rapo_trl.tools import PythonTool

        self.sandbox = PythonTool()
        self.seconds = 0.0
        self.calls = 0

    def make(self):
        def python(code: str) -> str:
            """Run Python code in a sandbox and return what it prints.

            Args:
                code: The Python source code to run.
            """
            start = time.perf_counter()
            try:
                return self.sandbox.run(code)
            finally:
                self.seconds += time.perf_counter() - start
                self.calls += 1

        return python


class InMemoryStore:
    """Stand-in for ``TraceStore`` when it does not import: numpy cosine top-1 over embedded step keys."""

    def __init__(self, keys: list[str], texts: list[str]):
        from rapo_trl.embeddings import default_embedder

        self.embedder = default_embedder()
        self.texts = texts
        self.vectors = self.embedder.embed(keys)

    def __len__(self):
        return len(self.texts)

    def select(self, contexts):
        from types import SimpleNamespace

        if not contexts:
            return []
        queries = self.embedder.embed([c[-1300:] for c in contexts])
        best = (queries @ self.vectors.T).argmax(axis=1)
        return [SimpleNamespace(text=self.texts[i], is_fallback=False, record_id=str(i), reward=1.0,
                                similarity=None) for i in best]


def build_store(path: Path, n_questions: int):
    """The arithmetic expert's trajectories in a Chroma TraceStore (or the in-memory stand-in)."""
    from rapo_trl.tasks import load_task
    from rapo_trl.tasks.arithmetic import expert

    rows = list(load_task("arithmetic", "train", n=n_questions))
    trajectories = [expert(row) for row in rows]
    try:
        from rapo_trl.store import TraceStore
        from rapo_trl.store.config import StoreConfig
    except ImportError as error:  # the store is still being written elsewhere
        print(f"TraceStore does not import ({error}); using an in-memory stand-in.", file=sys.stderr)
        keys, texts = [], []
        for row, trajectory in zip(rows, trajectories):
            for step in trajectory.split("</think>"):
                keys.append(row["question"] + "\n" + step)
                texts.append(step)
        return InMemoryStore(keys, texts), "in-memory numpy (TraceStore did not import)"
    store = TraceStore(path, config=StoreConfig(show_progress=False))
    store.add_trajectories(
        trajectories, [1.0] * len(rows), [row["question_id"] for row in rows],
        prompts=[row["question"] for row in rows],
    )
    return store, f"Chroma TraceStore, {len(store)} step records, all-MiniLM-L6-v2"


# ----------------------------------------------------------------------------- trainers


@dataclass
class Setup:
    name: str
    model: object
    tokenizer: object
    max_completion_length: int
    scripted_max_completion_length: int
    prompts_per_batch: int
    num_generations: int
    repeats: int
    notes: list[str] = field(default_factory=list)


def common_args(out: Path, setup: Setup, max_completion_length: int, seed: int) -> dict:
    return dict(
        output_dir=str(out), use_cpu=True, bf16=False, report_to="none", save_strategy="no",
        per_device_train_batch_size=setup.prompts_per_batch * setup.num_generations,
        num_generations=setup.num_generations, max_completion_length=max_completion_length,
        temperature=1.0, top_p=1.0, seed=seed, logging_steps=1, beta=0.0,
    )


def zero_reward(completions, **kwargs):
    return [0.0] * len(completions)


def make_trl_trainer(setup: Setup, tokenizer, dataset, out: Path, max_len: int, seed: int, tool_fn):
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(**common_args(out, setup, max_len, seed))
    with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return GRPOTrainer(setup.model, zero_reward, args=args, train_dataset=dataset,
                           processing_class=tokenizer, tools=[tool_fn] if tool_fn else None)


def make_rapo_trainer(setup: Setup, dataset, out: Path, max_len: int, seed: int, store, calls: int):
    from rapo_trl.config import RAPOConfig
    from rapo_trl.tools import PythonTool
    from rapo_trl.trainer import RAPOTrainer

    args = RAPOConfig(
        **common_args(out, setup, max_len, seed),
        max_turn_tokens=max_len,  # TRL has no per-turn cap: give ours the whole budget per turn too
        max_tool_calls=max(calls, 1), num_hybrid_generations=setup.num_generations // 2,
        retrieve_prob=0.5, tool_workers=8,
    )
    with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return RAPOTrainer(setup.model, zero_reward, args=args, train_dataset=dataset,
                           processing_class=setup.tokenizer, trace_store=store, tools=[PythonTool()])


# ----------------------------------------------------------------------------- runs


@dataclass
class RunResult:
    seconds: float
    rows: int
    policy_tokens: int
    forced_tokens: int
    prompt_tokens: float
    tool_calls: int
    retrievals: int = 0
    generate_s: float = 0.0
    tool_s: float = 0.0
    retrieval_s: float = 0.0
    cpu_s: float = 0.0  # CPU time of this process (not of tool subprocesses); steadier than wall time under load


def run_trl(trainer, prompts, tool_wrapper) -> RunResult:
    if trainer.tools:  # built per batch in _generate_and_score_completions, which we bypass
        trainer._sync_tool_dicts = [{t.__name__: t for t in trainer.tools} for _ in prompts]
        trainer._async_tool_dicts = [{} for _ in prompts]
    calls_before = tool_wrapper.calls if tool_wrapper else 0
    tool_before = tool_wrapper.seconds if tool_wrapper else 0.0
    start = time.perf_counter()
    prompt_ids, completion_ids, tool_mask, *_ = trainer._generate(prompts)
    seconds = time.perf_counter() - start
    masks = tool_mask if tool_mask is not None else [[1] * len(c) for c in completion_ids]
    policy = sum(sum(m) for m in masks)
    total = sum(len(c) for c in completion_ids)
    tool_s = (tool_wrapper.seconds - tool_before) if tool_wrapper else 0.0
    return RunResult(seconds, len(completion_ids), policy, total - policy,
                     statistics.mean(len(p) for p in prompt_ids),
                     (tool_wrapper.calls - calls_before) if tool_wrapper else 0, tool_s=tool_s)


def run_rapo(trainer, prompts) -> RunResult:
    start = time.perf_counter()
    prompt_ids, completion_ids, tool_mask, *_ = trainer._generate(prompts)
    seconds = time.perf_counter() - start
    policy = sum(sum(m) for m in tool_mask)
    total = sum(len(c) for c in completion_ids)
    stats = trainer.rollout_engine.last_stats
    # _generate alone hands the rows over to no scoring step: take them, so the next call's hand-over starts empty.
    rows, trainer.pending_rollout = trainer.pending_rollout.rows, None
    return RunResult(seconds, len(completion_ids), policy, total - policy,
                     statistics.mean(len(p) for p in prompt_ids), sum(r.tool_calls for r in rows),
                     sum(len(r.retrievals) for r in rows), stats.generate_seconds, stats.tool_seconds,
                     stats.retrieval_seconds)


def bench_paths(label: str, paths: dict, repeats: int, seed: int) -> dict[str, list[RunResult]]:
    """Warm up each path once, then ``repeats`` timed rounds; the order rotates every round to cancel drift.

    ``paths`` maps a name to ``(run, reset)``; every path of a round starts from the same torch seed.
    """
    runs = {name: [] for name in paths}
    names = list(paths)
    for rep in range(-1, repeats):
        order = names if rep % 2 == 0 else names[::-1]
        for name in order:
            run, reset = paths[name]
            torch.manual_seed(seed + 1000 * (rep + 1))
            if reset is not None:
                reset(seed + rep)
            result = run()
            if rep >= 0:
                runs[name].append(result)
            tag = "warm-up" if rep < 0 else f"run {rep + 1}"
            print(f"  [{label}] {name} {tag}: {result.seconds:.2f}s, {result.policy_tokens} policy tok, "
                  f"{result.tool_calls} calls, {result.retrievals} retrievals", flush=True)
    return runs


def summarize(runs: list[RunResult]) -> dict:
    """Medians over the timed runs (robust to a run hit by the shared machine); shares are time-weighted."""
    seconds = sum(r.seconds for r in runs)
    return {
        "s_median": statistics.median(r.seconds for r in runs),
        "s_min": min(r.seconds for r in runs),
        "s_max": max(r.seconds for r in runs),
        "rows": runs[0].rows,
        "prompt_tokens": statistics.mean(r.prompt_tokens for r in runs),
        "policy_tokens": statistics.mean(r.policy_tokens for r in runs),
        "forced_tokens": statistics.mean(r.forced_tokens for r in runs),
        "tool_calls": statistics.mean(r.tool_calls for r in runs),
        "retrievals": statistics.mean(r.retrievals for r in runs),
        "tok_s": statistics.median(r.policy_tokens / r.seconds for r in runs),
        "rows_s": statistics.median(r.rows / r.seconds for r in runs),
        "gen_share": sum(r.generate_s for r in runs) / seconds,
        "tool_share": sum(r.tool_s for r in runs) / seconds,
        "retrieval_share": sum(r.retrieval_s for r in runs) / seconds,
    }


def paired_ratio(b_runs: list[RunResult], a_runs: list[RunResult], rows: bool) -> float:
    """Median over rounds of B's rate / A's rate in the same round (same seed, adjacent in time)."""
    def rate(r):
        return (r.rows if rows else r.policy_tokens) / r.seconds

    return statistics.median(rate(b) / rate(a) for b, a in zip(b_runs, a_runs))


# ----------------------------------------------------------------------------- models


def load_setups(args, workdir: Path) -> list[Setup]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rapo_trl.models import build_tiny_model, smollm2_path

    setups = []
    if "tiny" in args.models:
        model, tokenizer, _ = build_tiny_model(workdir / "tiny")
        setups.append(Setup("tiny (Qwen2, random, h=32)", model, tokenizer,
                            args.tiny_max_len, args.tiny_scripted_max_len, args.prompts, args.generations,
                            args.repeats))
    if "smollm2" in args.models:
        path = smollm2_path()
        tokenizer = AutoTokenizer.from_pretrained(path)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        setups.append(Setup("SmolLM2-135M-Instruct", model, tokenizer,
                            args.smol_max_len, args.smol_scripted_max_len, args.smol_prompts, args.generations,
                            args.smol_repeats))
    return setups


def qwen_template_copy(tokenizer):
    """The same tokenizer with TRL's Qwen2.5 ChatML template (it renders tools and tool calls)."""
    from rapo_trl.models import _qwen25_chat_template

    clone = copy.deepcopy(tokenizer)
    clone.chat_template = _qwen25_chat_template()
    return clone


# ----------------------------------------------------------------------------- engine vs plain generate (issue 17 §5)


class ScriptedCallsByContent(LogitsProcessor):
    """Tool-heavy policy for any batch layout: each row is read from its own ids, not its batch index.

    A row with fewer than ``calls`` complete forced calls samples ``free`` tokens of the current turn (EOS
    banned), then is forced through ``call_ids``; the turn starts after the last of ``boundaries`` (the
    prompt's assistant header, a tool result's closing tag). Works whether rows keep their place in the
    batch (``generate``) or leave it as they stop (the KV-cached loop).
    """

    def __init__(self, call_ids: list[int], boundaries: list[list[int]], calls: int, free: int, banned: list[int]):
        self.call = torch.tensor(call_ids)
        self.boundaries = [torch.tensor(b) for b in boundaries]
        self.calls, self.free, self.banned = calls, free, banned

    @staticmethod
    def _ends(ids: torch.Tensor, pattern: torch.Tensor) -> torch.Tensor:
        """Positions just after each occurrence of ``pattern`` in ``ids``."""
        if len(ids) < len(pattern):
            return ids.new_zeros(0)
        hits = (ids.unfold(0, len(pattern), 1) == pattern.to(ids.device)).all(-1).nonzero().squeeze(1)
        return hits + len(pattern)

    def __call__(self, input_ids, scores):
        for row in range(input_ids.shape[0]):
            ids = input_ids[row]
            if len(self._ends(ids, self.call)) >= self.calls:
                continue
            start = max(int(e[-1]) if len(e) else 0 for e in (self._ends(ids, b) for b in self.boundaries))
            step = len(ids) - start
            if step < self.free:
                scores[row, self.banned] = -float("inf")
            elif step - self.free < len(self.call):
                token = int(self.call[step - self.free])
                scores[row, :] = -float("inf")
                scores[row, token] = 0.0
        return scores


class RowLengths(StoppingCriteria):
    """Stops row ``i`` of a ``generate`` call once it has sampled ``counts[i]`` tokens."""

    def __init__(self, start: int, counts: list[int]):
        self.start, self.counts = start, torch.tensor(counts)

    def __call__(self, input_ids, scores, **kwargs):
        return (input_ids.shape[1] - self.start) >= self.counts.to(input_ids.device)


def plain_generate(model, tokenizer, prompts: list[list[int]], counts: list[int], banned: list[int]) -> RunResult:
    """``model.generate`` on the same rows, row ``i`` sampling exactly ``counts[i]`` tokens (EOS suppressed;
    rows that reach their count pad along until the longest is done, as generate does)."""
    from transformers import GenerationConfig, StoppingCriteriaList

    width = max(len(p) for p in prompts)
    pad = tokenizer.pad_token_id
    input_ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros_like(input_ids)
    for r, p in enumerate(prompts):
        input_ids[r, width - len(p):] = torch.tensor(p)
        mask[r, width - len(p):] = 1
    config = GenerationConfig(max_new_tokens=max(counts), do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                              pad_token_id=pad, eos_token_id=banned[0], suppress_tokens=banned)
    model.eval()
    input_ids, mask = input_ids.to(model.device), mask.to(model.device)
    start, cpu = time.perf_counter(), time.process_time()
    with torch.no_grad():
        out = model.generate(input_ids=input_ids, attention_mask=mask, generation_config=config,
                             stopping_criteria=StoppingCriteriaList([RowLengths(width, counts)]))
    if out.is_cuda:
        torch.cuda.synchronize()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    assert out.shape[1] - width == max(counts)
    return RunResult(seconds, len(prompts), sum(counts), 0, statistics.mean(len(p) for p in prompts), 0,
                     generate_s=seconds, cpu_s=cpu)


def run_engine(engine, prompts: list[list[int]]) -> tuple[RunResult, list[int]]:
    start, cpu = time.perf_counter(), time.process_time()
    rows = engine.run(prompts)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    stats = engine.last_stats
    policy = [sum(r.env_mask) for r in rows]
    total = sum(len(r.completion_ids) for r in rows)
    result = RunResult(seconds, len(rows), sum(policy), total - sum(policy),
                       statistics.mean(len(p) for p in prompts), sum(r.tool_calls for r in rows), 0,
                       stats.generate_seconds, stats.tool_seconds, stats.retrieval_seconds, cpu_s=cpu)
    return result, policy


def engine_vs_generate(args) -> int:
    """The engine's policy tok/s against plain ``generate`` on the same rows and sampled token counts."""
    import json

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rapo_trl.models import smollm2_path
    from rapo_trl.rollout import HybridRolloutEngine, RolloutConfig, TransformersBackend
    from rapo_trl.rollout.agent import render_prompt
    from rapo_trl.tasks import SYSTEM_PROMPT, load_task, to_rapo_rows
    from rapo_trl.tools import PythonTool

    started = time.perf_counter()
    info = machine_info()
    load_at_start = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    path = smollm2_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.ev_dtype]
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(args.ev_device)
    banned = sorted({tokenizer.eos_token_id, *_as_list(model.generation_config.eos_token_id)} - {None})
    call_ids = tokenizer(RAPO_CALL, add_special_tokens=False)["input_ids"]
    boundaries = [tokenizer("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"],
                  tokenizer("</result>\n", add_special_tokens=False)["input_ids"]]
    system_prompt = SHORT_SYSTEM_PROMPT if args.system_prompt == "short" else SYSTEM_PROMPT
    config = RolloutConfig(max_completion_length=args.ev_max_len, max_turn_tokens=args.ev_turn_tokens,
                           num_generations=args.generations, num_hybrid_generations=0, retrieve_prob=0.0)
    records = []
    for n_rows in args.ev_rows:
        n_prompts = max(1, n_rows // args.generations)
        data = to_rapo_rows(load_task("arithmetic", "eval", n=n_prompts), system_prompt=system_prompt)
        prompts = [render_prompt(tokenizer, row["prompt"]) for row in data for _ in range(args.generations)]
        for variant in args.variants:
            extra = ([ScriptedCallsByContent(call_ids, boundaries, args.calls, args.free_tokens, banned)]
                     if variant == "scripted" else [])
            engines = {
                "engine (KV cache)": HybridRolloutEngine(
                    tokenizer, TransformersBackend(model, tokenizer, logits_processor=extra), [PythonTool()], None,
                    config, seed=args.seed),
                "engine (generate per turn)": HybridRolloutEngine(
                    tokenizer, TransformersBackend(model, tokenizer, reuse_kv=False, logits_processor=extra),
                    [PythonTool()], None, config, seed=args.seed),
            }
            label = f"{len(prompts)} rows / {variant}"
            # Short untimed warm-up of every path (first-call costs: kernels, stop-string tables, the sandbox).
            short = [prompts[0], prompts[-1]]
            plain_generate(model, tokenizer, short, [4, 4], banned)
            for engine in engines.values():
                engine.backend.generate(short, [4, 4], engine.stop_strings)
                PythonTool().run("print(1)")
            runs: dict[str, list[RunResult]] = {}
            for rep in range(-1 if args.ev_warmup else 0, args.ev_repeats):
                seed = args.seed + 1000 * (rep + 1)
                torch.manual_seed(seed)
                new, counts = run_engine(engines["engine (KV cache)"], prompts)
                mean = -(-sum(counts) // len(counts))
                others = {  # name: (function, arguments)
                    "generate, same per-row counts": (plain_generate, (model, tokenizer, prompts, counts, banned)),
                    "generate, equal counts (mean)": (plain_generate,
                                                      (model, tokenizer, prompts, [mean] * len(counts), banned)),
                    "engine (generate per turn)": (run_engine, (engines["engine (generate per turn)"], prompts)),
                }
                names = list(others) if rep % 2 == 0 else list(others)[::-1]
                results = {"engine (KV cache)": new}
                for name in names:
                    torch.manual_seed(seed)
                    function, arguments = others[name]
                    result = function(*arguments)
                    results[name] = result[0] if isinstance(result, tuple) else result
                tag = "warm-up" if rep < 0 else f"run {rep + 1}"
                print(f"  [{label}] {tag}: " + "; ".join(
                    f"{k}: {r.seconds:.1f}s {r.policy_tokens} tok ({r.policy_tokens / r.seconds:.1f} tok/s)"
                    for k, r in results.items()), flush=True)
                if rep >= 0:
                    for name, result in results.items():
                        runs.setdefault(name, []).append(result)
            new_runs = runs["engine (KV cache)"]
            for name, rs in runs.items():
                s = summarize(rs)
                records.append({
                    "rows": len(prompts), "variant": variant, "path": name, "rounds": len(rs),
                    "prompt_tokens": s["prompt_tokens"], "policy_tokens": s["policy_tokens"],
                    "forced_tokens": s["forced_tokens"], "tool_calls": s["tool_calls"], "s_median": s["s_median"],
                    "policy_tok_s": s["tok_s"],
                    "policy_tok_s_generate_time": statistics.median(r.policy_tokens / r.generate_s for r in rs),
                    "policy_tok_per_cpu_s": statistics.median(r.policy_tokens / r.cpu_s for r in rs),
                    "kv_engine_over_this": (None if name == "engine (KV cache)"
                                            else paired_ratio(new_runs, rs, rows=False)),
                    "kv_engine_over_this_cpu": (None if name == "engine (KV cache)" else statistics.median(
                        (b.policy_tokens / b.cpu_s) / (a.policy_tokens / a.cpu_s) for b, a in zip(new_runs, rs))),
                    "runs": [vars(r) for r in rs],
                })
    settings = (f"SmolLM2-135M-Instruct ({args.ev_dtype} on {args.ev_device}), arithmetic eval prompts with the {args.system_prompt} system prompt, "
                f"G={args.generations} rows per prompt, max_completion_length {args.ev_max_len}, max_turn_tokens "
                f"{args.ev_turn_tokens}, temperature 1.0, PythonTool (real sandbox), no retrieval; torch threads "
                f"{torch.get_num_threads()}. Scripted variant: {args.calls} forced `<python>` call(s) per row after "
                f"{args.free_tokens} sampled tokens each, then free sampling to EOS or the budget.")
    invocation = {"machine": info, "settings": settings, "load_average_at_start": load_at_start,
                  "command": " ".join([Path(sys.executable).name, *sys.argv]),
                  "seconds": round(time.perf_counter() - started)}
    out_md = args.out or RESULTS / "rollout.md"
    out_json = out_md.with_suffix(".json")
    data = json.loads(out_json.read_text()) if out_json.exists() else {}
    section = data.get("engine_vs_generate", {"model": "SmolLM2-135M-Instruct", "invocations": [], "records": []})
    section["invocations"].append(invocation)
    replaced = {(r["rows"], r["variant"]) for r in records}
    for r in records:
        r["invocation"] = len(section["invocations"])
    section["records"] = [r for r in section["records"] if (r["rows"], r["variant"]) not in replaced] + records
    data["engine_vs_generate"] = section
    out_json.write_text(json.dumps(data, indent=1) + "\n")
    block = render_engine_vs_generate(section)
    print("\n" + block)
    old = out_md.read_text() if out_md.exists() else ""
    out_md.write_text(splice_block(old, block))
    print(f"written to {out_md} and {out_json}")
    return 0


def render_engine_vs_generate(section: dict) -> str:
    used = sorted({r["invocation"] for r in section["records"]})
    header = ["| rows / variant | path | rounds | prompt tok | policy tok/run | forced tok/run | tool calls/run | "
              "s/run | policy tok/s (wall) | policy tok per CPU s | KV engine / this (wall) | "
              "KV engine / this (CPU) | run |",
              "|" + "---|" * 13]
    order = {"scripted": 0, "natural": 1}
    lines = []
    for r in sorted(section["records"], key=lambda r: (r["rows"], order.get(r["variant"], 2))):
        ratio = "" if r["kv_engine_over_this"] is None else f"{r['kv_engine_over_this']:.2f}"
        ratio_cpu = "" if r["kv_engine_over_this_cpu"] is None else f"**{r['kv_engine_over_this_cpu']:.2f}**"
        lines.append(f"| {r['rows']} rows / {r['variant']} | {r['path']} | {r['rounds']} | {r['prompt_tokens']:.0f} | "
                     f"{r['policy_tokens']:.0f} | {r['forced_tokens']:.0f} | {r['tool_calls']:.1f} | "
                     f"{r['s_median']:.1f} | {r['policy_tok_s']:.1f} | {r['policy_tok_per_cpu_s']:.1f} | "
                     f"{ratio} | {ratio_cpu} | {r['invocation']} |")
    runs = []
    for i in used:
        inv = section["invocations"][i - 1]
        m = inv["machine"]
        runs.append(f"{i}. `{inv['command']}` ({inv['seconds']} s; {m['date']}; load average at start "
                    f"{inv['load_average_at_start']}). {m['cpu']}; Python {m['python']}, torch {m['torch']}, "
                    f"transformers {m['transformers']}, trl {m['trl']}. {inv['settings']}")
    legend = ("Each round runs the KV-cached engine first (seeded), then the other paths in alternating order, each "
              "from the same seed. *generate, same per-row counts*: one `model.generate` call on the same rows, "
              "row i sampling exactly as many tokens as the engine's row i sampled (EOS suppressed; finished rows "
              "pad along until the longest is done, as generate does). *generate, equal counts*: every row samples "
              "the engine's mean count rounded up (no ragged ends: plain generate at its best). *engine (generate "
              "per turn)*: the same engine with `TransformersBackend(reuse_kv=False)`, one left-padded `generate` "
              "call per turn (the path before this change). Policy tokens are the engine's mask-1 tokens (forced "
              "calls count, tool results do not). Wall tok/s includes the engine's tool time. *CPU s*: this "
              "process's CPU time (torch runs one thread; sandboxed tool subprocesses are not counted, they are "
              "~1 % of the engine's wall time), far steadier than wall time on a shared, oversubscribed machine. "
              "Ratio columns: median over rounds of the within-round ratio of rates (> 1: the KV engine is faster).")
    return "\n".join([
        MARK_BEGIN,
        "## The engine against plain `generate` (issue 17 §5)",
        "", *header, *lines, "", legend, "", "Runs:", "", *runs,
        MARK_END,
    ])


MARK_BEGIN, MARK_END = "<!-- engine-vs-generate -->", "<!-- /engine-vs-generate -->"


def splice_block(text: str, block: str) -> str:
    """``text`` with its engine-vs-generate block replaced by ``block`` (put first when it has none)."""
    if MARK_BEGIN in text and MARK_END in text:
        head, rest = text.split(MARK_BEGIN, 1)
        return head + block + rest.split(MARK_END, 1)[1]
    return block + "\n\n" + text


# ----------------------------------------------------------------------------- main


def fmt_row(model, variant, path, s, ratio_tok="", ratio_rows="", shares=True) -> str:
    share = (f"{100 * s['gen_share']:.0f}% | {100 * s['tool_share']:.0f}% | {100 * s['retrieval_share']:.0f}%"
             if shares else f"– | {100 * s['tool_share']:.0f}% | –")
    return (f"| {model} | {variant} | {path} | {s['rows']} | {s['prompt_tokens']:.0f} | {s['policy_tokens']:.0f} | "
            f"{s['forced_tokens']:.0f} | {s['tool_calls']:.1f} | {s['retrievals']:.1f} | "
            f"{s['s_median']:.2f} ({s['s_min']:.2f}–{s['s_max']:.2f}) | {s['tok_s']:.1f} | {s['rows_s']:.2f} | {ratio_tok} | "
            f"{ratio_rows} | {share} |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: small budgets, 1 repeat (~2.5 min at load 4 on 2 cores)")
    parser.add_argument("--models", nargs="+", default=["tiny", "smollm2"], choices=["tiny", "smollm2"])
    parser.add_argument("--variants", nargs="+", default=["natural", "scripted"], choices=["natural", "scripted"])
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per path (tiny model)")
    parser.add_argument("--smol-repeats", type=int, default=2, help="timed runs per path (SmolLM2)")
    parser.add_argument("--prompts", type=int, default=2, help="distinct prompts per batch (tiny model)")
    parser.add_argument("--smol-prompts", type=int, default=1, help="distinct prompts per batch (SmolLM2)")
    parser.add_argument("--system-prompt", choices=["short", "full"], default="short",
                        help="short: a ~60-token tag instruction; full: the shipped RAPO system prompt")
    parser.add_argument("--generations", type=int, default=4, help="rows per prompt (G)")
    parser.add_argument("--tiny-max-len", type=int, default=256)
    parser.add_argument("--tiny-scripted-max-len", type=int, default=384)
    parser.add_argument("--smol-max-len", type=int, default=48)
    parser.add_argument("--smol-scripted-max-len", type=int, default=176)
    parser.add_argument("--calls", type=int, default=2, help="scripted tool calls per row")
    parser.add_argument("--free-tokens", type=int, default=8, help="sampled tokens before each scripted call")
    parser.add_argument("--store-questions", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads (1: on a shared, oversubscribed machine OpenMP barriers make 2 "
                             "threads 10-25x slower than 1; 0: leave torch's default)")
    parser.add_argument("--out", type=Path, default=None, help="markdown output (default results/rollout.md)")
    parser.add_argument("--engine-vs-generate", action="store_true",
                        help="only the engine against plain model.generate on the same rows (SmolLM2); updates "
                             "its block in results/rollout.md and results/rollout.json")
    parser.add_argument("--ev-rows", type=int, nargs="+", default=[4, 16], help="rows per batch (engine vs generate)")
    parser.add_argument("--ev-max-len", type=int, default=256, help="max_completion_length (engine vs generate)")
    parser.add_argument("--ev-turn-tokens", type=int, default=160, help="max_turn_tokens (engine vs generate)")
    parser.add_argument("--ev-repeats", type=int, default=2, help="timed rounds (engine vs generate)")
    parser.add_argument("--ev-warmup", action="store_true", help="one untimed round first (engine vs generate)")
    parser.add_argument("--ev-device", default="cpu", help="where the model runs (engine vs generate): cpu, cuda")
    parser.add_argument("--ev-dtype", default="fp32", choices=["fp32", "bf16"], help="weights (engine vs generate)")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats = args.smol_repeats = 1
        args.tiny_max_len, args.tiny_scripted_max_len = 64, 160
        args.smol_max_len, args.smol_scripted_max_len = 16, 96
        args.calls, args.store_questions = 1, 20
        args.prompts, args.smol_prompts, args.generations = 1, 1, 2
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.engine_vs_generate:
        warnings.filterwarnings("ignore", category=FutureWarning)
        logging.getLogger("transformers").setLevel(logging.ERROR)
        return engine_vs_generate(args)
    out_path = args.out or RESULTS / ("rollout_quick.md" if args.quick else "rollout.md")

    warnings.filterwarnings("ignore", category=FutureWarning)
    logging.getLogger("transformers").setLevel(logging.ERROR)
    logging.getLogger("rapo_trl").setLevel(logging.ERROR)
    from datasets import Dataset

    from rapo_trl.tasks import SYSTEM_PROMPT, load_task, to_rapo_rows

    started = time.perf_counter()
    info = machine_info()
    workdir = Path(tempfile.mkdtemp(prefix="bench_rollout_"))
    store, store_desc = build_store(workdir / "store", args.store_questions)
    system_prompt = SHORT_SYSTEM_PROMPT if args.system_prompt == "short" else SYSTEM_PROMPT
    print(f"store: {store_desc}", flush=True)

    lines, notes, batches = [], [], []
    for setup in load_setups(args, workdir):
        data = to_rapo_rows(load_task("arithmetic", "eval", n=setup.prompts_per_batch), system_prompt=system_prompt)
        prompts = [row["prompt"] for row in data for _ in range(setup.num_generations)]
        dataset = Dataset.from_list([{"prompt": row["prompt"]} for row in data])
        batches.append(f"{setup.name}: {setup.prompts_per_batch} prompt(s) x G={setup.num_generations} = "
                       f"{len(prompts)} rows, {setup.repeats} timed repeats per path")
        for variant in args.variants:
            scripted = variant == "scripted"
            max_len = setup.scripted_max_completion_length if scripted else setup.max_completion_length
            label = f"{setup.name} / {variant}"
            tool_wrapper = TimedPythonFunction()
            trl_tokenizer, trl_kind = setup.tokenizer, "TRL tools= loop"
            paths, kinds = {}, {}
            try:
                trl = make_trl_trainer(setup, trl_tokenizer, dataset, workdir / "trl", max_len, args.seed,
                                       tool_wrapper.make())
            except ValueError as error:
                if "tool calling" not in str(error):
                    raise
                refusal = (f"{setup.name}: TRL refuses `tools=` with the model's own chat template "
                           f"(\"{str(error).splitlines()[0]}\")")
                trl = None
                if not scripted:
                    notes.append(refusal + "; natural variant: only TRL's plain single-turn `_generate` (A0) runs.")
                else:
                    notes.append(refusal + "; scripted variant: TRL's tool loop runs on a tokenizer copy with TRL's "
                                 "Qwen2.5 ChatML template (same <|im_start|>/<|im_end|> tokens).")
                    trl_tokenizer = qwen_template_copy(setup.tokenizer)
                    trl = make_trl_trainer(setup, trl_tokenizer, dataset, workdir / "trl", max_len, args.seed,
                                           tool_wrapper.make())
                    trl_kind = "TRL tools= loop (Qwen2.5 template)"
            if trl is not None:
                trl_call = ('<tool_call>\n{"name": "python", "arguments": {"code": "' + CALL_CODE
                            + '"}}\n</tool_call>' + trl_tokenizer.eos_token)

                def run_a(trl=trl, tool_wrapper=tool_wrapper, tok=trl_tokenizer, call=trl_call, scripted=scripted,
                          setup=setup, prompts=prompts):
                    ctx = (scripted_generate(setup.model, tok, call, args.calls, args.free_tokens)
                           if scripted else contextlib.nullcontext())
                    with ctx:
                        return run_trl(trl, copy.deepcopy(prompts), tool_wrapper)

                paths["A"], kinds["A"] = (run_a, None), trl_kind
            if not scripted:  # the strict engine-overhead baseline: TRL without tools=, same prompt tokens as B
                plain = make_trl_trainer(setup, setup.tokenizer, dataset, workdir / "plain", max_len, args.seed, None)

                def run_a0(plain=plain, prompts=prompts):
                    return run_trl(plain, copy.deepcopy(prompts), None)

                paths["A0"], kinds["A0"] = (run_a0, None), "TRL single-turn (no tools=)"
            rapo = make_rapo_trainer(setup, dataset, workdir / "rapo", max_len, args.seed, store, args.calls)

            def run_b(rapo=rapo, scripted=scripted, setup=setup, prompts=prompts):
                ctx = (scripted_generate(setup.model, setup.tokenizer, RAPO_CALL, args.calls, args.free_tokens)
                       if scripted else contextlib.nullcontext())
                with ctx:
                    return run_rapo(rapo, copy.deepcopy(prompts))

            def reset_b(seed, rapo=rapo):
                rapo.rollout_engine.rng.seed(seed)

            paths["B"], kinds["B"] = (run_b, reset_b), "RAPO engine"
            setup.model.train()
            print(f"{label}: max_completion_length={max_len}; " + "; ".join(f"{k} = {v}" for k, v in kinds.items()),
                  flush=True)
            runs = bench_paths(label, paths, setup.repeats, args.seed)
            sums = {name: summarize(r) for name, r in runs.items()}
            others = [name for name in sums if name != "B"]
            ratios = [f"**{paired_ratio(runs['B'], runs[n], rows=False):.2f}** vs {n}" for n in others]
            row_ratios = [f"**{paired_ratio(runs['B'], runs[n], rows=True):.2f}** vs {n}" for n in others]
            for name, summary in sums.items():
                if name == "B":
                    lines.append(fmt_row(setup.name, f"{variant} (L={max_len})", f"B: {kinds[name]}", summary,
                                         "<br>".join(ratios), "<br>".join(row_ratios)))
                else:
                    lines.append(fmt_row(setup.name, f"{variant} (L={max_len})", f"{name}: {kinds[name]}", summary,
                                         shares=False))
            del paths, runs

    header = [
        "| model | variant | path | rows | prompt tok | policy tok/run | forced tok/run | tool calls/run | "
        "retrievals/run | s/run median (min–max) | policy tok/s | rows/s | B/A policy tok/s | B/A rows/s | generate | tools | retrieval |",
        "|" + "---|" * 17,
    ]
    env = (f"Machine: {info['cpu']}; Python {info['python']}, torch {info['torch']}, transformers "
           f"{info['transformers']}, trl {info['trl']}; {info['date']}.")
    settings = (f"Batches (arithmetic eval prompts, {args.system_prompt} system prompt): {'; '.join(batches)}; "
                f"temperature 1.0, torch seeded identically per round, torch threads {torch.get_num_threads()}; "
                f"one warm-up per path, then timed rounds with the path order reversed every round. RAPO: hybrid rows {args.generations // 2}/{args.generations}, "
                f"retrieve_prob 0.5, store: {store_desc}; PythonTool sandbox for both paths. Scripted variant: "
                f"{args.calls} forced call(s) per row after {args.free_tokens} sampled tokens each.")
    legend = ("Rates are medians over the timed runs; B/A ratios are medians over rounds of the ratio within a round "
              "(same seed, adjacent in time). policy tok = completion tokens with mask 1; forced tok = tool results (+ retrieved steps for B) "
              "and, for TRL, the chat-template tool-response framing. generate/tools/retrieval = share of B's "
              "wall time from `rollout_engine.last_stats` (A: tools share = time inside the tool function). A0 (natural variant only) is TRL's plain `_generate` without `tools=`: same prompt tokens as B, so B/A0 is the engine's own overhead; A's prompts also carry TRL's tool schema.")
    text = "\n".join([
        f"# Rollout throughput: RAPO engine (B) vs TRL's tool loop (A){' — quick smoke run' if args.quick else ''}",
        "", env, "", settings, "", *header, *lines, "", legend, "", *(f"- {n}" for n in notes), "",
        f"Command: `{' '.join([Path(sys.executable).name, *sys.argv])}`; total {time.perf_counter() - started:.0f} s.",
        "",
    ])
    print("\n" + text)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(text)
    print(f"written to {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
