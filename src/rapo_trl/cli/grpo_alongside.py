"""``grpo_alongside``: the GRPO baseline of ``grpo_same_rollouts`` trains in a second process while RAPO trains in
this one, from the same start. The second process is spawned (a fresh interpreter, never a fork of a process that
holds a model, threads and perhaps a CUDA context) and loads the recipe's questions, rewards and model itself."""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
from contextlib import contextmanager

from rapo_trl.cli.errors import TRACEBACK_ENV, UsageError, report
from rapo_trl.cli.grpo_baseline import grpo_baseline_folder, train_grpo_baseline


def check_grpo_alongside(script) -> None:
    """Refuse, before anything loads, what a second process beside RAPO cannot do."""
    if not script.grpo_alongside:
        return
    if not script.grpo_same_rollouts:
        raise UsageError("grpo_alongside trains the GRPO baseline of grpo_same_rollouts in a second process; set "
                         "grpo_same_rollouts: true as well, or drop grpo_alongside")
    processes = int(os.environ.get("WORLD_SIZE", "1"))
    if processes > 1:
        raise UsageError(f"grpo_alongside starts one second process beside a single-process run, not one beside each "
                         f"of {processes} launched processes; drop it (the baseline then trains after RAPO on all "
                         f"{processes})")


def share_cpu_threads(use_cpu: bool) -> None:
    """On the CPU, half of the torch threads as this process's: RAPO's process and the baseline's each take one
    half. On a GPU both share the device and nothing changes."""
    from rapo_trl.hardware import threads_per_process, trainer_device

    if trainer_device(use_cpu) != "cpu":
        return
    import torch

    torch.set_num_threads(threads_per_process(2))


def end_with_parent() -> None:
    """End this second process as soon as the process that started it ends, however it ends (SIGKILL too): nobody
    would wait for the baseline, and a training left running holds cores or GPU memory."""
    parent = multiprocessing.parent_process()

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="rapo-end-with-parent", daemon=True).start()


def train_in_second_process(script, rapo_args, model_args, start: str | None, run_id: str | None = None) -> None:
    """The second process's whole work: the recipe's questions, rewards and model loaded again, and the baseline
    trained from ``start`` for the recipe's max_steps. An error is reported as ``rapo train`` reports one, and its
    exit code is the process's."""
    from rapo_trl.cli.console import configure_console
    from rapo_trl.cli.trainer_build import load_policy_source, load_training_data

    end_with_parent()
    configure_console()
    share_cpu_threads(rapo_args.use_cpu)
    try:
        data = load_training_data(script, rapo_args)
        source = load_policy_source(rapo_args, model_args)
        train_grpo_baseline(data, source, start, rapo_args, steps=None, run_id=run_id)
    except Exception as error:  # noqa: BLE001 - reported as the command would, then the exit code says it failed
        if TRACEBACK_ENV in os.environ:
            raise
        sys.exit(report("train", error))


@contextmanager
def grpo_alongside(script, rapo_args, model_args, start: str | None, run_id: str | None = None):
    """While the ``with`` body trains RAPO, the GRPO baseline of the run ``run_id`` trains from ``start`` in a second
    process. On leaving the body the baseline is waited for, and its failure raised; if the body raises (an error,
    Ctrl-C, a SIGTERM stop), or the wait is interrupted, the second process is ended at once."""
    share_cpu_threads(rapo_args.use_cpu)
    context = multiprocessing.get_context("spawn")
    process = context.Process(target=train_in_second_process, args=(script, rapo_args, model_args, start, run_id),
                              name="rapo-grpo-baseline")
    process.start()
    folder = grpo_baseline_folder(rapo_args)
    print(f"GRPO baseline (retrieval off) training alongside RAPO in process {process.pid}; it saves to {folder}.")
    try:
        yield process
        print(f"RAPO finished; waiting for the GRPO baseline (process {process.pid}).")
        process.join()
    except BaseException:
        end_process(process)
        raise
    if process.exitcode != 0:
        raise RuntimeError(f"the GRPO baseline trained alongside RAPO failed ({exit_description(process.exitcode)}; "
                           f"its output above says why), so {folder} is incomplete; RAPO's model is saved in "
                           f"{rapo_args.output_dir}")


def end_process(process) -> None:
    """Kill ``process`` and wait for it: a baseline cut short is of no use, and a SIGTERM would let it finish its step
    and save a checkpoint first."""
    if process.is_alive():
        process.kill()
    process.join()


def exit_description(exitcode: int) -> str:
    if exitcode < 0:
        return f"ended by {signal.Signals(-exitcode).name}"
    return f"exit code {exitcode}"
