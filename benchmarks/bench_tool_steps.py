"""What a hybrid rollout would retrieve from the demo's store, with the expert's one ``<python>`` call or one call per
operation, simulated without a model.

For each ``tool_steps`` setting (``one``, ``per_operation``) it builds the demo recipe's store as ``rapo build-store``
does (``configs/demo_cpu.yaml``: the scripted expert on RL's ``reward_only`` questions, difficulty 1, 128 questions,
2 trajectories each, the best 2 kept, a quarter slipped; embedded Chroma, MiniLM), then stands in for a rollout of
each of those questions with the expert's correct trajectory (its own generator, so not the stored text) and queries
the store as the engine does at each boundary:

- ``tool_step``: after each tool result, the context is the question (``prompt_text(prompt) + "\\n"``) and the
  trajectory up to that result;
- ``plan``: before the first step, the question alone (the engine queries a plan boundary with the prefix only).

It reports, over the stored steps the queries get (fallbacks aside), the share holding a final answer (``<answer>``,
as ``rapo/retrieved_answer_share`` counts it) and the share from the row's own question, by similarity alone and with
``retrieve_own_question`` (``TraceStore.select(question_ids=...)``). With ``retrieve_at: [plan, tool_step]`` every
boundary draws a retrieval with the same probability, so its shares pool both boundaries' queries. What the
simulation leaves out: a rollout that retrieves goes on from the inserted step (later queries then read it), and a
policy's text is not the expert's.

    python benchmarks/bench_tool_steps.py                 # both settings; writes results/tool_steps.md
    python benchmarks/bench_tool_steps.py --questions 32  # smaller, faster
    python benchmarks/bench_tool_steps.py --difficulty 2 --out benchmarks/results/tool_steps_difficulty2.md  # up to 3
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # common.py, however this is loaded
from common import (  # noqa: E402
    RESULTS,
    command_line,
    machine_info,
    machine_line,
    markdown_table,
    print_report,
    use_offline_environment,
)

use_offline_environment()  # before sentence-transformers and chromadb are imported

RECIPE = Path(__file__).resolve().parent.parent / "configs" / "demo_cpu.yaml"
SETTINGS = ("one", "per_operation")
BOUNDARIES = {"tool_step": ("tool_step",), "plan + tool_step": ("plan", "tool_step")}
"""Table label -> the ``retrieve_at`` boundaries whose queries it pools."""


def recipe(store_path: Path, tool_steps: str, questions: int, difficulty: int):
    """The demo recipe's build-store arguments, with ``tool_steps`` and a store of its own (no warm-start collection:
    only the store RL retrieves from is measured)."""
    from rapo_trl.cli import parse_recipe

    return parse_recipe("build-store", ["--config", str(RECIPE), "--store_path", str(store_path),
                                        "--task_tool_steps", tool_steps, "--train_size", str(questions),
                                        "--task_difficulty", str(difficulty), "--sft_warmup_steps", "0"])


def boundary_queries(rows, expert) -> list[tuple[str, str, str]]:
    """``(boundary, context, question id)`` of every boundary of a stand-in rollout of each row."""
    from rapo_trl.store.steps import prompt_text, split_steps

    queries = []
    for row in rows:
        prefix = prompt_text(row["prompt"]) + "\n"  # as the trainer's query prefix
        trajectory = expert(row, error_rate=0.0, rng=random.Random(f"rollout:{row['question_id']}"))
        steps = split_steps(trajectory)
        queries.append(("plan", prefix, row["question_id"]))
        queries += [("tool_step", prefix + "".join(steps[:k]), row["question_id"]) for k in range(1, len(steps))]
    return queries


def shares(store, queries, own_question: bool) -> dict[str, dict[str, float]]:
    """Per table label: retrievals, final-answer share and own-question share of the stored steps found (the store's
    own selection settings, as the trainer uses them)."""
    from rapo_trl.protocol import ANSWER_OPEN

    found = store.select([context for _, context, _ in queries],
                         question_ids=[qid for *_, qid in queries] if own_question else None)
    result = {}
    for label, boundaries in BOUNDARIES.items():
        picked = [(q, f) for q, f in zip(queries, found, strict=True) if q[0] in boundaries]
        stored = [(qid, f) for (_, _, qid), f in picked if not f.is_fallback]
        result[label] = {
            "queries": len(picked),
            "fallbacks": len(picked) - len(stored),
            "answer": sum(ANSWER_OPEN in f.text for _, f in stored) / max(len(stored), 1),
            "own": sum(str(f.question_id) == qid for qid, f in stored) / max(len(stored), 1),
        }
    return result


def measure(tool_steps: str, questions: int, difficulty: int, folder: Path) -> dict:
    from rapo_trl.cli import build_store
    from rapo_trl.cli.common import build_tools, open_store, training_rows
    from rapo_trl.tasks import get_task

    script, rapo_args, model_args = recipe(folder / tool_steps, tool_steps, questions, difficulty)
    start = time.perf_counter()
    built = build_store.run(script, rapo_args, model_args)
    build_s = time.perf_counter() - start
    gc.collect()  # the build's store object lets go of the folder's lock
    rows = training_rows(script, "store", build_tools(script))  # the store's questions, prompted as RL's rows
    store = open_store(script, must_exist=True)
    queries = boundary_queries(rows, get_task(script.task).expert)
    start = time.perf_counter()
    result = {"records": built["records"], "questions": built["questions"], "build_s": build_s,
              "by_similarity": shares(store, queries, own_question=False),
              "own_question": shares(store, queries, own_question=True)}
    result["query_s"] = time.perf_counter() - start
    store.close()
    return result


def report(results: dict, questions: int, difficulty: int, machine: dict) -> list[str]:
    head = ["tool_steps", "store records", "retrieve_at", "queries", "final-answer share", "own-question share",
            "final-answer share (own question)", "own-question share (own question)"]
    rows = []
    for setting, result in results.items():
        for label in BOUNDARIES:
            similar, own = result["by_similarity"][label], result["own_question"][label]
            rows.append([setting, result["records"], label, similar["queries"], f"{similar['answer']:.2f}",
                         f"{similar['own']:.2f}", f"{own['answer']:.2f}", f"{own['own']:.2f}"])
    return [
        f"# Retrieved steps with one `<python>` call or one per operation: difficulty {difficulty}",
        "",
        f"`{command_line()}`; {machine_line(machine)}.",
        "",
        f"The demo recipe's store (`configs/demo_cpu.yaml`: `reward_only`, difficulty {difficulty}, {questions} "
        "questions, "
        "2 trajectories each, the best 2 kept, expert error rate 0.25; MiniLM, embedded Chroma), built by "
        "`rapo build-store` once per `task_tool_steps`, queried at every boundary of a correct expert trajectory of "
        "each stored question (the rollout's query: the question plus the text up to the boundary). Shares are of "
        "the stored steps found (no query fell back unless `fallbacks` says so); \"(own question)\" asks with "
        "`retrieve_own_question`. No model runs: a rollout's later queries would read the step it retrieved, and "
        "a policy writes other text than the expert.",
        "",
        *markdown_table(head, rows),
        "",
        *[f"- `{setting}`: store built in {r['build_s']:.0f} s, {r['questions']} questions; queries answered in "
          f"{r['query_s']:.1f} s; fallbacks: "
          + ", ".join(f"{label} {r['by_similarity'][label]['fallbacks']}" for label in BOUNDARIES)
          for setting, r in results.items()],
        "",
    ]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=128, help="RL questions the store holds (the demo's 128)")
    parser.add_argument("--difficulty", type=int, default=1, help="task_difficulty (the demo's 1: two operations)")
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=SETTINGS)
    parser.add_argument("--out", type=Path, default=RESULTS / "tool_steps.md", help="markdown report ('-': print only)")
    args = parser.parse_args(argv)
    machine = machine_info("chromadb", "sentence-transformers")
    with tempfile.TemporaryDirectory(prefix="bench-tool-steps-") as folder:
        results = {setting: measure(setting, args.questions, args.difficulty, Path(folder)) for setting in args.settings}
    lines = report(results, args.questions, args.difficulty, machine)
    print_report(lines, args.out)


if __name__ == "__main__":
    main()
