"""Rollout throughput: RAPO's hybrid rollout engine against TRL's own multi-turn tool loop.

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
     retrieve_prob 0.5, timing ``trainer.roll_out_prompts(prompts)``, the hybrid rollout its ``rollout_func``
     runs. The rollout's stats split its time into generate / tools / retrieval.

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
``generate``-per-turn path. ``bench_engine_vs_generate.py`` measures the cached loop itself. This benchmark
redraws its own block of the markdown report (``--out``, default results/rollout.md) and leaves the rest.

    nice -n 5 .venv/bin/python benchmarks/bench_rollout.py            # default: ~12.5 min at load 4-7 on 2 cores
    nice -n 5 .venv/bin/python benchmarks/bench_rollout.py --quick    # smoke run: ~2.5 min at load 4
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import logging
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # common.py and rollout_runs.py, however this is loaded
from common import (  # noqa: E402
    RESULTS,
    command_line,
    machine_info,
    machine_line,
    markdown_table,
    splice_block,
    use_offline_environment,
)
from rollout_runs import (  # noqa: E402
    CALL_CODE,
    CALL_MARKER,
    RAPO_CALL,
    RunResult,
    add_shared_flags,
    end_token_ids,
    paired_ratio,
    summarize,
    system_prompt,
)

use_offline_environment()  # before torch and transformers are imported

import torch  # noqa: E402
from transformers import LogitsProcessor, LogitsProcessorList  # noqa: E402

BLOCK = "tools-loop"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_shared_flags(parser)
    parser.add_argument("--quick", action="store_true", help="smoke run: small budgets, 1 repeat (~2.5 min at load 4 on 2 cores)")
    parser.add_argument("--models", nargs="+", default=["tiny", "smollm2"], choices=["tiny", "smollm2"])
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per path (tiny model)")
    parser.add_argument("--smol-repeats", type=int, default=2, help="timed runs per path (SmolLM2)")
    parser.add_argument("--prompts", type=int, default=2, help="distinct prompts per batch (tiny model)")
    parser.add_argument("--smol-prompts", type=int, default=1, help="distinct prompts per batch (SmolLM2)")
    parser.add_argument("--tiny-max-len", type=int, default=256)
    parser.add_argument("--tiny-scripted-max-len", type=int, default=384)
    parser.add_argument("--smol-max-len", type=int, default=48)
    parser.add_argument("--smol-scripted-max-len", type=int, default=176)
    parser.add_argument("--store-questions", type=int, default=60)
    parser.add_argument("--out", type=Path, default=None,
                        help="markdown report whose tools-loop block this redraws (default results/rollout.md)")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats = args.smol_repeats = 1
        args.tiny_max_len, args.tiny_scripted_max_len = 64, 160
        args.smol_max_len, args.smol_scripted_max_len = 16, 96
        args.calls, args.store_questions = 1, 20
        args.prompts, args.smol_prompts, args.generations = 1, 1, 2
    args.out = args.out or RESULTS / ("rollout_quick.md" if args.quick else "rollout.md")
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--engine-vs-generate" in argv:  # once a mode of this script; the commands recorded in results/ still run
        import bench_engine_vs_generate

        return bench_engine_vs_generate.main([a for a in argv if a != "--engine-vs-generate"])
    args = parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    for name in ("transformers", "rapo_trl"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", category=FutureWarning)
    started, info = time.perf_counter(), machine_info()
    workdir = Path(tempfile.mkdtemp(prefix="bench_rollout_"))
    store, store_desc = build_store(workdir / "store", args.store_questions)
    print(f"store: {store_desc}", flush=True)
    lines, notes, batches = [], [], []
    for setup in load_setups(args, workdir):
        batch = Batch(setup, args.system_prompt)
        batches.append(batch.describe())
        for variant in args.variants:
            paths, kinds = make_paths(args, batch, variant, store, workdir, notes)
            setup.model.train()
            label = f"{setup.name} / {variant}"
            print(f"{label}: max_completion_length={batch.max_len(variant)}; "
                  + "; ".join(f"{k} = {v}" for k, v in kinds.items()), flush=True)
            lines += table_rows(setup.name, f"{variant} (L={batch.max_len(variant)})", kinds,
                                bench_paths(label, paths, setup.repeats, args.seed))
    text = report(args, info, store_desc, batches, lines, notes, time.perf_counter() - started)
    print("\n" + text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(splice_block(args.out.read_text() if args.out.exists() else "", text, BLOCK))
    print(f"written to {args.out}")
    return 0


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
    banned = end_token_ids(tokenizer, model)
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


def scripted_or_not(scripted: bool, model, tokenizer, call_text: str, args):
    return (scripted_generate(model, tokenizer, call_text, args.calls, args.free_tokens) if scripted
            else contextlib.nullcontext())


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


def build_store(path: Path, n_questions: int):
    """The arithmetic expert's trajectories in a Chroma TraceStore."""
    from rapo_trl.store import StoreConfig, TraceStore
    from rapo_trl.tasks import load_task
    from rapo_trl.tasks.arithmetic import expert

    rows = list(load_task("arithmetic", "train", n=n_questions))
    store = TraceStore(path, config=StoreConfig(show_progress=False))
    store.add_trajectories([expert(row) for row in rows], [1.0] * len(rows), [row["question_id"] for row in rows],
                           prompts=[row["question"] for row in rows])
    return store, f"Chroma TraceStore, {len(store)} step records, all-MiniLM-L6-v2"


# ----------------------------------------------------------------------------- models, batches and trainers


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


class Batch:
    """One setup's prompts: arithmetic eval questions, each repeated G times."""

    def __init__(self, setup: Setup, prompt_choice: str):
        from datasets import Dataset

        from rapo_trl.tasks import load_task, to_rapo_rows

        self.setup = setup
        data = to_rapo_rows(load_task("arithmetic", "eval", n=setup.prompts_per_batch),
                            system_prompt=system_prompt(prompt_choice))
        self.prompts = [row["prompt"] for row in data for _ in range(setup.num_generations)]
        self.dataset = Dataset.from_list([{"prompt": row["prompt"]} for row in data])

    def max_len(self, variant: str) -> int:
        s = self.setup
        return s.scripted_max_completion_length if variant == "scripted" else s.max_completion_length

    def describe(self) -> str:
        s = self.setup
        return (f"{s.name}: {s.prompts_per_batch} prompt(s) x G={s.num_generations} = {len(self.prompts)} rows, "
                f"{s.repeats} timed repeats per path")


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


def qwen_template_copy(tokenizer):
    """The same tokenizer with TRL's Qwen2.5 ChatML template (it renders tools and tool calls)."""
    from rapo_trl.models import qwen25_chat_template

    clone = copy.deepcopy(tokenizer)
    clone.chat_template = qwen25_chat_template()
    return clone


# ----------------------------------------------------------------------------- the paths


def make_paths(args, batch: Batch, variant: str, store, workdir: Path, notes: list[str]) -> tuple[dict, dict]:
    """``(paths, kinds)``: each path's ``(run, reset)`` and what it is. A: TRL's ``tools=`` loop (on a tokenizer
    copy with TRL's Qwen2.5 template where TRL refuses the model's own, scripted variant; skipped in the natural
    one, with a note); A0 (natural only): TRL's plain single-turn ``_generate``; B: RAPO's engine."""
    setup, scripted, max_len = batch.setup, variant == "scripted", batch.max_len(variant)
    paths, kinds = {}, {}
    tool_wrapper = TimedPythonFunction()
    tokenizer, kind = setup.tokenizer, "TRL tools= loop"
    try:
        trl = make_trl_trainer(setup, tokenizer, batch.dataset, workdir / "trl", max_len, args.seed, tool_wrapper.make())
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
            tokenizer, kind = qwen_template_copy(setup.tokenizer), "TRL tools= loop (Qwen2.5 template)"
            trl = make_trl_trainer(setup, tokenizer, batch.dataset, workdir / "trl", max_len, args.seed,
                                   tool_wrapper.make())
    if trl is not None:
        call = ('<tool_call>\n{"name": "python", "arguments": {"code": "' + CALL_CODE + '"}}\n</tool_call>'
                + tokenizer.eos_token)

        def run_a():
            with scripted_or_not(scripted, setup.model, tokenizer, call, args):
                return run_trl(trl, copy.deepcopy(batch.prompts), tool_wrapper)

        paths["A"], kinds["A"] = (run_a, None), kind
    if not scripted:  # the strict engine-overhead baseline: TRL without tools=, same prompt tokens as B
        plain = make_trl_trainer(setup, setup.tokenizer, batch.dataset, workdir / "plain", max_len, args.seed, None)
        paths["A0"], kinds["A0"] = (lambda: run_trl(plain, copy.deepcopy(batch.prompts), None), None), \
            "TRL single-turn (no tools=)"
    rapo = make_rapo_trainer(setup, batch.dataset, workdir / "rapo", max_len, args.seed, store, args.calls)

    def run_b():
        with scripted_or_not(scripted, setup.model, setup.tokenizer, RAPO_CALL, args):
            return run_rapo(rapo, copy.deepcopy(batch.prompts))

    paths["B"], kinds["B"] = (run_b, lambda seed: rapo.rollout_engine.rng.seed(seed)), "RAPO engine"
    return paths, kinds


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
    rollout = trainer.roll_out_prompts(prompts)
    seconds = time.perf_counter() - start
    rows, stats = rollout.rows, rollout.stats
    policy = sum(sum(r.env_mask) for r in rows)
    total = sum(len(r.completion_ids) for r in rows)
    return RunResult(seconds, len(rows), policy, total - policy,
                     statistics.mean(len(r.prompt_ids) for r in rows), sum(r.tool_calls for r in rows),
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


# ----------------------------------------------------------------------------- report

HEAD = ["model", "variant", "path", "rows", "prompt tok", "policy tok/run", "forced tok/run", "tool calls/run",
        "retrievals/run", "s/run median (min–max)", "policy tok/s", "rows/s", "B/A policy tok/s", "B/A rows/s",
        "generate", "tools", "retrieval"]
LEGEND = (
    "Rates are medians over the timed runs; B/A ratios are medians over rounds of the ratio within a round "
    "(same seed, adjacent in time). policy tok = completion tokens with mask 1; forced tok = tool results (+ "
    "retrieved steps for B) and, for TRL, the chat-template tool-response framing. generate/tools/retrieval = "
    "share of B's wall time from the rollout's stats (A: tools share = time inside the tool function). A0 "
    "(natural variant only) is TRL's plain `_generate` without `tools=`: same prompt tokens as B, so B/A0 is the "
    "engine's own overhead; A's prompts also carry TRL's tool schema."
)


def table_rows(model: str, variant: str, kinds: dict, runs: dict[str, list[RunResult]]) -> list[list]:
    """One row per path; B's row carries its ratios to every other path and its time shares."""
    others = [name for name in runs if name != "B"]
    rows = []
    for name, rs in runs.items():
        s = summarize(rs)
        if name == "B":
            ratios = ["<br>".join(f"**{paired_ratio(runs['B'], runs[n], rows=by_rows):.2f}** vs {n}" for n in others)
                      for by_rows in (False, True)]
            shares = [f"{100 * s[k]:.0f}%" for k in ("gen_share", "tool_share", "retrieval_share")]
        else:
            ratios, shares = ["", ""], ["–", f"{100 * s['tool_share']:.0f}%", "–"]
        rows.append([model, variant, f"{name}: {kinds[name]}", s["rows"], f"{s['prompt_tokens']:.0f}",
                     f"{s['policy_tokens']:.0f}", f"{s['forced_tokens']:.0f}", f"{s['tool_calls']:.1f}",
                     f"{s['retrievals']:.1f}", f"{s['s_median']:.2f} ({s['s_min']:.2f}–{s['s_max']:.2f})",
                     f"{s['tok_s']:.1f}", f"{s['rows_s']:.2f}", *ratios, *shares])
    return rows


def report(args, info: dict, store_desc: str, batches: list[str], rows: list[list], notes: list[str],
           seconds: float) -> str:
    settings = (f"Batches (arithmetic eval prompts, {args.system_prompt} system prompt): {'; '.join(batches)}; "
                f"temperature 1.0, torch seeded identically per round, torch threads {torch.get_num_threads()}; "
                "one warm-up per path, then timed rounds with the path order reversed every round. RAPO: hybrid "
                f"rows {args.generations // 2}/{args.generations}, retrieve_prob 0.5, store: {store_desc}; PythonTool "
                f"sandbox for both paths. Scripted variant: {args.calls} forced call(s) per row after "
                f"{args.free_tokens} sampled tokens each.")
    return "\n".join([
        f"# Rollout throughput: RAPO engine (B) vs TRL's tool loop (A){' — quick smoke run' if args.quick else ''}",
        "", f"Machine: {machine_line(info)}; {info['date']}.", "", settings, "", *markdown_table(HEAD, rows),
        "", LEGEND, "", *(f"- {n}" for n in notes), "", f"Command: `{command_line()}`; total {seconds:.0f} s.",
    ])


if __name__ == "__main__":
    sys.exit(main())
