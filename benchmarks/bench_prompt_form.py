"""Whether a first-step retrieval finds the row's own question when the training prompts and the store's keys differ
in form: a conversation (its system message stays out of keys and queries) or plain text (read whole, instructions
and all, as ``to_rapo_rows(..., conversational=False)`` writes it). No model runs.

It reads a store built by ``rapo build-store`` from conversations (the demo's: ``rapo build-store --config
configs/demo_cpu.yaml``) and takes each question's rewarded first-step key, which is the question itself. For each
system prompt (the Python-only one the demo teaches, and the default one) it asks with plain-text queries of the
first ``--questions`` questions, as the engine asks at a ``start`` or ``plan`` boundary (``prompt_text(prompt) +
"\\n"``), and counts the queries whose selected step is from the asked question:

- the built store as it is (keys from conversations);
- the built store opened with ``StoreConfig(system_prompt=<the prompt>)``, which cuts it from queries;
- a store of the same rewarded first steps keyed from the plain-text prompts, as is and with the cut.

    python benchmarks/bench_prompt_form.py                                  # runs/demo/store; writes results/prompt_form.md
    python benchmarks/bench_prompt_form.py --store runs/other/store --out -  # print only
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # common.py, however this is loaded
from common import (  # noqa: E402
    RESULTS,
    command_line,
    machine_info,
    machine_line,
    markdown_table,
    print_report,
    shown_path,
    use_offline_environment,
)

use_offline_environment()  # before sentence-transformers and chromadb are imported


def plain_prompt(system: str, question: str) -> str:
    """A plain-text row's prompt, as ``to_rapo_rows(..., conversational=False)`` writes it."""
    from datasets import Dataset

    from rapo_trl.tasks import to_rapo_rows

    rows = to_rapo_rows(Dataset.from_dict({"question": [question], "answer": ["0"]}), system_prompt=system,
                        conversational=False)
    return rows[0]["prompt"]


def first_steps(store) -> dict[str, tuple[str, str]]:
    """Question id -> (its first-step key, the step's text), of the first rewarded first step stored for it."""
    found = store.collection.get(where={"step_index": 0}, include=["documents", "metadatas"])
    steps: dict[str, tuple[str, str]] = {}
    for key, meta in zip(found["documents"], found["metadatas"]):
        if meta["reward"] > 0:
            steps.setdefault(meta["question_id"], (key, meta["value"]))
    return steps


def own_found(store, queries: list[str], asked: list[str]) -> int:
    return sum(step.question_id == question_id for step, question_id in zip(store.select(queries), asked))


def measure(store_path: Path, questions: int) -> list[list]:
    from rapo_trl.store import StoreConfig, TraceStore
    from rapo_trl.tasks import SYSTEM_PROMPT, system_prompt_for
    from rapo_trl.tools import PythonTool

    built = TraceStore(store_path, must_exist=True)
    steps = first_steps(built)
    every = sorted(steps)
    asked = every[:questions]
    rows = []
    for label, system in (("Python-only", system_prompt_for([PythonTool()])), ("default", SYSTEM_PROMPT)):
        prompts = {question_id: plain_prompt(system, steps[question_id][0]) for question_id in every}
        queries = [prompts[question_id] + "\n" for question_id in asked]
        cut = StoreConfig(system_prompt=system)
        counts = [own_found(built, queries, asked),
                  own_found(TraceStore(store_path, must_exist=True, config=cut), queries, asked)]
        for config in (StoreConfig(), cut):
            with tempfile.TemporaryDirectory(prefix="bench-prompt-form-") as folder:
                plain = TraceStore(folder, config=config)
                plain.add_trajectories([steps[q][1] for q in every], [1.0] * len(every), every,
                                       prompts=[prompts[q] for q in every], keep_top_k=None)
                counts.append(own_found(plain, queries, asked))
                plain.close()
        rows.append([f"{label} ({len(system)} characters)", *(f"{count} / {len(asked)}" for count in counts)])
    built.close()
    return rows


def report(rows: list[list], store_path: Path, questions: int, machine: dict) -> list[str]:
    head = ["system prompt", "keys from conversations", "same, system_prompt cut", "keys from plain text",
            "same, system_prompt cut"]
    return [
        "# First-step retrieval with plain-text prompts against keys of either form",
        "",
        f"`{command_line()}`; {machine_line(machine)}.",
        "",
        f"Store `{shown_path(store_path)}` (built by `rapo build-store` from conversations; "
        f"MiniLM, embedded Chroma): each question's first rewarded first step. Plain-text queries of {questions} of "
        "its questions, as the engine asks at a `start` or `plan` boundary; a cell counts the queries whose "
        "selected step (3 nearest keys, the best reward kept) is the asked question's. \"keys from plain text\": "
        "a store of the same steps keyed from the plain-text prompts; \"system_prompt cut\": the store opened with "
        "`StoreConfig(system_prompt=<the prompt>)`.",
        "",
        *markdown_table(head, rows),
        "",
    ]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, default=Path("runs/demo/store"), help="a store built from conversations")
    parser.add_argument("--questions", type=int, default=32, help="questions asked")
    parser.add_argument("--out", type=Path, default=RESULTS / "prompt_form.md", help="markdown report ('-': print only)")
    args = parser.parse_args(argv)
    machine = machine_info("chromadb", "sentence-transformers")
    lines = report(measure(args.store, args.questions), args.store, args.questions, machine)
    print_report(lines, args.out)


if __name__ == "__main__":
    main()
