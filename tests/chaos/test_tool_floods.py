"""Every `<python>` call of a training step fails the same way, through the real sandbox: it runs past its timeout
(an infinite loop), it crashes, or no process can be started (the process limit, simulated: fork's EAGAIN cannot
be produced on demand as root). Training goes on; each row gets the error text as its result and is scored with
it; a step's tool time stays within the timeout times its calls; the failures are counted."""

from __future__ import annotations

import errno
import subprocess
import time

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

from rapo_trl.config import RAPOConfig
from rapo_trl.tools import PythonTool
from rapo_trl.trainer import RAPOTrainer
from tests.helpers.leaks import Footprint
from tests.helpers.scripted import Turn
from tests.helpers.trainers import G, common_args, dataset, script

TIMEOUT = 1.0
FLOODS = {
    "timeout": ("while True:\n    pass", f"TimeoutError: the code ran longer than the {TIMEOUT:g} s time limit"),
    "crash": ("import ctypes\nctypes.string_at(0)", "terminated by a signal (SIGSEGV)"),
    "no_child": ("print(7)", "The sandbox could not start a process (BlockingIOError"),
}


def error_seen(completions, **kwargs):
    """1 for a row that saw a tool error in its own context: the reward scores the error text."""
    return [float("Error:" in c[0]["content"]) for c in completions]


class ScriptEachStep(TrainerCallback):
    def __init__(self, trainer, scripts):
        self.trainer, self.scripts = trainer, scripts

    def on_step_begin(self, args, state, control, **kwargs):
        script(self.trainer, self.scripts)


@pytest.mark.parametrize("flood", sorted(FLOODS))
def test_a_flood_of_failing_tool_calls_is_survived_and_counted(flood, tiny_model_dir, tmp_path, monkeypatch):
    code, error = FLOODS[flood]
    if flood == "no_child":
        def no_process(*args, **kwargs):
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")

        monkeypatch.setattr(subprocess, "Popen", no_process)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "temp"))
    (tmp_path / "temp").mkdir()
    args = RAPOConfig(**common_args(tmp_path / "run", max_steps=2, max_completion_length=256), max_turn_tokens=32, retrieve_prob=0.0)
    trainer = RAPOTrainer(AutoModelForCausalLM.from_pretrained(tiny_model_dir), error_seen, args=args,
                          train_dataset=dataset(), processing_class=AutoTokenizer.from_pretrained(tiny_model_dir),
                          tools=[PythonTool(timeout=TIMEOUT)])
    trainer.add_callback(ScriptEachStep(trainer, [[Turn(f"<python>{code}</python>"), Turn("<answer>7</answer>"),
                                                   Turn("<|im_end|>")]] * G))
    before = Footprint.now()
    start = time.monotonic()
    trainer.train()
    assert trainer.state.global_step == 2
    logs = [e for e in trainer.state.log_history if "tools/failure_frequency" in e]
    assert [e["tools/failure_frequency"] for e in logs] == [1.0, 1.0]  # every call failed and was counted
    assert [e["reward"] for e in logs] == [1.0, 1.0]  # every row was scored with its error text
    rows = trainer.last_rollout.rows
    assert all(row.tool_failures == 1 and error in row.tool_errors[0][1] for row in rows), rows[0].tool_errors
    text = trainer.processing_class.decode(rows[0].completion_ids)
    assert error.split(" (")[0] in text and "<answer>7</answer>" in text  # the error is the result; the row went on
    # G calls a step, run side by side (up to tool_workers at once): never more than the timeout times the calls.
    assert all(e["rapo/time_tools"] <= TIMEOUT * G + 1.0 for e in logs), [e["rapo/time_tools"] for e in logs]
    assert time.monotonic() - start < 2 * (TIMEOUT * G + 1.0) + 30  # the whole run: two steps and the start
    assert Footprint.now() == before  # no process, descriptor or temp entry left behind
