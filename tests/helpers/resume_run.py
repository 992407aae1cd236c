"""A tiny-model RAPO run that a test stops at a known point of a step and resumes: real sandboxed ``<python>`` calls,
a real embedded Chroma store that the run grows (``store_growth_min_reward``), retrieval drawn with p = 0.5, and three questions
taking one step each (the fourth step starts the second epoch). Generation is scripted, but each step's scripts are
drawn from torch's RNG as sampling would draw tokens: a resume that lost the sampling RNG would see other rollouts.

Run as a script (``python -m tests.helpers.resume_run MODEL RUN STORE [--resume]``), it trains in its own process;
``RAPO_TEST_STOP=PHASE:STEP:SIGNAL`` (phase ``generate``, ``loss`` or ``save``; signal ``kill`` or ``term``) makes
it write ``RAPO_TEST_MARKER`` when step STEP reaches that phase, then hold there until the parent's signal has
arrived: a SIGKILL lands there, and a SIGTERM has been taken by the trainer before the step goes on (``make_trainer(
stop=...)`` with signal ``self``: the run sends itself the SIGTERM, for a test in its own process). At
``generate`` with ``kill``, it holds inside a real sandbox call (a sleeping program), so the kill finds one running.
Every log entry is appended to ``RUN/log.jsonl`` and every step's per-row rewards and retrieved records to
``RUN/steps.jsonl`` as they happen, so a killed run leaves what it did.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
from pathlib import Path

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

from rapo_trl.config import RAPOConfig
from rapo_trl.embeddings import HashingEmbedder
from rapo_trl.store import StoreConfig, TraceStore
from rapo_trl.tools import PythonTool
from rapo_trl.trainer import RAPOTrainer
from tests.helpers.scripted import Turn
from tests.helpers.trainers import G, common_args, script

STEPS = 4
QUESTIONS = 3
STOP_ENV, MARKER_ENV = "RAPO_TEST_STOP", "RAPO_TEST_MARKER"
HOLD_S = 120  # a parent that never signals: give up holding, and fail the test by the outcome


def open_store(path) -> TraceStore:
    return TraceStore(path, collection="steps", embedder=HashingEmbedder(64, name="h64"),
                      config=StoreConfig(show_progress=False))


def build_store(path) -> None:
    """Two stored trajectories a question: something to retrieve after each tool step."""
    with open_store(path) as store:
        texts, rewards, ids, prompts = [], [], [], []
        for q in range(QUESTIONS):
            for answer in (7, 77):
                texts.append(f"<python>print({answer})</python>\n<result>\n{answer}\n</result>\n<answer>{answer}</answer>")
                rewards.append(float(answer == 7))
                ids.append(f"q{q}")
                prompts.append(f"Compute {q}")
        store.add_trajectories(texts, rewards, ids, prompts=prompts, keep_top_k=None)


def answer_value(completions, **kwargs):
    """A tenth of the answer's number (the rows of a group differ, so the loss has something to learn)."""
    found = [re.findall(r"<answer>(\d+)</answer>", c[0]["content"]) for c in completions]
    return [int(f[-1]) / 10 if f else 0.0 for f in found]


class Stopper:
    """Where the run holds for its parent's signal (``RAPO_TEST_STOP``), and whether it is there yet."""

    def __init__(self, spec: str | None, marker: str | None):
        phase, step, signal = (spec or "::").split(":")
        self.phase, self.step, self.signal, self.marker = phase, int(step or 0), signal, marker
        self.current = 0

    def at(self, phase: str, step: int) -> bool:
        return phase == self.phase and step == self.step

    def hold(self, trainer, code_runner=None) -> None:
        if self.marker:
            Path(self.marker).write_text(str(os.getpid()))
        if self.signal == "self":  # in the test's own process: it signals itself
            os.kill(os.getpid(), signal.SIGTERM)
        if self.signal == "kill" and code_runner is not None:
            code_runner("import time\ntime.sleep(600)")  # a sandbox process is running when the kill lands
        deadline = time.monotonic() + HOLD_S
        while time.monotonic() < deadline and not trainer.stop_requested:
            time.sleep(0.02)


class HeldTool(PythonTool):
    """The real sandbox; at the stop point, the first call holds there before running its own code."""

    def __init__(self, stopper: Stopper, **kwargs):
        super().__init__(**kwargs)
        self.stopper, self.trainer = stopper, None

    def run(self, text: str) -> str:
        stopper = self.stopper
        if stopper.at("generate", stopper.current):
            stopper.phase = "done"  # one call holds, not every row's
            stopper.hold(self.trainer, super().run)
        return super().run(text)


class DrawnScripts(TrainerCallback):
    """Each step's scripts, drawn from torch's RNG at the step's start (after a resume has restored it)."""

    def __init__(self, trainer, stopper: Stopper):
        self.trainer, self.stopper = trainer, stopper

    def on_step_begin(self, args, state, control, **kwargs):
        self.stopper.current = state.global_step + 1
        draws = torch.randint(0, 10, (G, 2)).tolist()
        script(self.trainer, [[Turn(f"<python>print({a} * 7)</python>"), Turn(f"<answer>{b}</answer>"),
                               Turn("<|im_end|>")] for a, b in draws])


class Journal(TrainerCallback):
    """Appends each log entry, and each step's per-row rewards and retrieved record ids, as they happen."""

    def __init__(self, trainer, run_dir: Path):
        self.trainer, self.log, self.steps = trainer, run_dir / "log.jsonl", run_dir / "steps.jsonl"

    @staticmethod
    def _append(path: Path, entry: dict) -> None:
        with open(path, "a") as handle:
            handle.write(json.dumps(entry) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def on_step_end(self, args, state, control, **kwargs):
        rollout = self.trainer.last_rollout
        self._append(self.steps, {"step": state.global_step, "questions": [row["question_id"] for row in rollout.inputs],
                                  "rewards": rollout.rewards.tolist(),
                                  "retrieved": [[e.record_id for e in row.retrievals] for row in rollout.rows]})

    def on_log(self, args, state, control, logs=None, **kwargs):
        self._append(self.log, {"step": state.global_step, **logs})


def make_trainer(model_dir, run_dir, store_dir, *, max_steps: int = STEPS, save_steps: int = 2,
                 stop: str | None = None, marker: str | None = None) -> RAPOTrainer:
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    stopper = Stopper(stop, marker)
    args = RAPOConfig(**common_args(run_dir, max_steps=max_steps, save_strategy="steps", save_steps=save_steps),
                      max_turn_tokens=32, retrieve_prob=0.5, store_growth_min_reward=0.0)
    rows = [{"prompt": [{"role": "user", "content": f"Compute {q}"}], "question_id": f"q{q}"} for q in range(QUESTIONS)]
    tool = HeldTool(stopper, timeout=30.0)
    trainer = RAPOTrainer(AutoModelForCausalLM.from_pretrained(model_dir), answer_value, args=args,
                          train_dataset=Dataset.from_list(rows), processing_class=AutoTokenizer.from_pretrained(model_dir),
                          trace_store=open_store(store_dir), tools=[tool])
    tool.trainer = trainer
    trainer.add_callback(DrawnScripts(trainer, stopper))
    trainer.add_callback(Journal(trainer, run_dir))
    compute_loss, save_rng_state = trainer.compute_loss, trainer._save_rng_state

    def held_loss(*a, **k):
        if stopper.at("loss", stopper.current):
            stopper.hold(trainer)
        return compute_loss(*a, **k)

    def held_save(output_dir):  # inside the save: the weights and optimizer written, trainer_state.json not yet
        if stopper.at("save", trainer.state.global_step):
            stopper.hold(trainer)
        return save_rng_state(output_dir)

    trainer.compute_loss, trainer._save_rng_state = held_loss, held_save
    return trainer


def read_jsonl(path) -> list[dict]:
    path = Path(path)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def per_step(run_dir) -> dict[int, tuple]:
    """step -> (questions, per-row rewards, retrieved record ids, loss, mean reward): each step as it was last taken
    (a resumed run journals the steps it takes again after the interrupted run's)."""
    steps = {e["step"]: e for e in read_jsonl(Path(run_dir) / "steps.jsonl")}
    logs = {e["step"]: e for e in read_jsonl(Path(run_dir) / "log.jsonl") if "loss" in e}
    return {step: (e["questions"], e["rewards"], e["retrieved"], logs[step]["loss"], logs[step]["reward"])
            for step, e in steps.items() if step in logs}


def store_records(path) -> tuple[list[str], list[dict]]:
    """Every record's id and metadata."""
    with open_store(path) as store:
        pages = list(store.iter_batches())
    return [i for p in pages for i in p["ids"]], [m for p in pages for m in p["metadatas"]]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("run")
    parser.add_argument("store")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--max_steps", type=int, default=STEPS)
    options = parser.parse_args(argv)
    trainer = make_trainer(options.model, options.run, options.store, max_steps=options.max_steps,
                           stop=os.environ.get(STOP_ENV), marker=os.environ.get(MARKER_ENV))
    trainer.train(resume_from_checkpoint=True if options.resume else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
