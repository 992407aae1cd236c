"""Every check of your data, tools, rewards and store that needs no model answers before torch, datasets or
TRL load, in under a second: JSONL contents at their real line, columns, null answers, split names, import paths
(read from source, not imported), reward arguments no column provides, and store collections that are missing or
empty."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap

from tests.cli.runs import rapo_env

MY_CODE = textwrap.dedent('''
    import torch  # never run by the checks: they read this file, they do not import it


    def needs_units(completions, units, **kwargs):
        return [0.0 for _ in completions]


    def exact(completions, answer, **kwargs):
        return [0.0 for _ in completions]
''')


MISSING_TRACKER = next(name for name in ("dvclive", "swanlab", "clearml", "neptune", "dagshub")
                       if importlib.util.find_spec(name) is None)
"""A tracker transformers knows whose package this environment lacks."""


def _answers_in_a_fresh_process(cases: dict, before: list[str], cwd, then: str = "") -> dict:
    """Runs ``rapo train BEFORE ARGV`` for each case's argv in one new process (``then`` after them) and asserts each
    exits 2 with one line holding its words, with none of torch, transformers, TRL or datasets imported. Returns the
    process's result: each case's exit code and stderr (``out``), and the seconds the cases and ``then`` took."""
    code = textwrap.dedent(f"""
        import contextlib, io, json, sys, time
        from rapo_trl.cli import main, read_recipe
        started = time.perf_counter()
        out = {{}}
        for name, (argv, words) in {json.dumps(cases)}.items():
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                out[name] = (main(["train", *{before!r}, *argv]), err.getvalue())
        {then}
        seconds = time.perf_counter() - started
        loaded = sorted(m for m in ("torch", "transformers", "trl", "datasets") if m in sys.modules)
        print(json.dumps({{"out": out, "seconds": seconds, "loaded": loaded}}))
    """)
    run = subprocess.run([sys.executable, "-c", code], env=rapo_env(), capture_output=True, text=True, timeout=120,
                         cwd=cwd)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    for name, (_, words) in cases.items():
        code_, err = result["out"][name]
        lines = err.strip().splitlines()
        assert code_ == 2 and len(lines) == 1 and words in lines[0], (name, err)
    assert result["loaded"] == []
    return result


def test_data_tool_and_reward_mistakes_answer_without_heavy_imports(tmp_path):
    (tmp_path / "my_code.py").write_text(MY_CODE)
    good = tmp_path / "qa.jsonl"
    good.write_text("".join(json.dumps({"question": f"What is {i} + {i}?", "answer": str(2 * i)}) + "\n"
                            for i in range(20)))
    broken = tmp_path / "broken.jsonl"
    broken.write_text(good.read_text().splitlines()[0] + "\n" + '{"question": "What is 1 + 1?", "answer": 2\n')
    data = ["--task", "dataset", "--dataset_path", str(good)]
    cases = {  # argv: words of the one line
        "malformed": (["--task", "dataset", "--dataset_path", str(broken)], "broken.jsonl:2: not JSON"),
        "file_as_name": (["--task", "dataset", "--dataset_name", str(good)], "give a JSONL file as dataset_path"),
        "split_with_path": ([*data, "--dataset_test_split", "tset"], "dataset_test_split names a split"),
        "tool_missing": ([*data, "--tools", "my_code.calculator"], "tool 'my_code.calculator': my_code has no calculator"),
        "tool_module_missing": ([*data, "--tools", "my_toolz.calc"], "tool 'my_toolz.calc': no module my_toolz"),
        "reward_missing": ([*data, "--reward", "my_code.exactt"], "reward 'my_code.exactt': my_code has no exactt"),
        "environment_missing": ([*data, "--environment_factory", "my_code.Calc"],
                                "environment_factory 'my_code.Calc': my_code has no Calc"),
        "reward_argument": ([*data, "--reward_funcs", "my_code.needs_units"],
                            "reward 'my_code.needs_units' requires the argument(s) 'units', which no data column"),
        "groups_split": ([*data, "--num_generations", "3", "--per_device_train_batch_size", "4"],
                         "generation_batch_size (4 = per_device_train_batch_size 4 x 1 process(es) x "
                         "steps_per_generation 1) must be divisible by num_generations (3)"),
        "eval_groups_split": ([*data, "--num_generations", "4", "--per_device_train_batch_size", "4",
                               "--eval_strategy", "steps", "--per_device_eval_batch_size", "6"],
                              "must be divisible by the generations per eval prompt (4)"),
        "tracker_missing": ([*data, "--report_to", MISSING_TRACKER],
                            f"report_to {MISSING_TRACKER} needs the {MISSING_TRACKER} package, which is not installed"),
    }
    # what must pass: TRL's accuracy_reward (its `solution` fed from the answer column) and a reward reading `answer`
    passes = f'read_recipe("train", {json.dumps(data)} + ["--reward_funcs", "trl.rewards.accuracy_reward", "my_code.exact"])'
    result = _answers_in_a_fresh_process(cases, [], tmp_path, then=passes)
    assert result["seconds"] < 1.0 * len(cases), result["seconds"]  # well under a second each; a busy machine


def test_a_wrong_or_empty_store_collection_answers_before_torch_or_trl(tmp_path, tiny_model_dir):
    from rapo_trl.store import TraceStore
    from tests.cli.conftest import recipe, write_yaml

    TraceStore(tmp_path / "store").close()  # the default collection, made and empty
    config = write_yaml(tmp_path / "recipe.yaml", {**recipe(tiny_model_dir, tmp_path), "retrieve_prob": 1.0})
    cases = {  # argv after the recipe: words of the one line
        "wrong_collection": (["--store_collection", "trace"], "no collection 'trace'"),
        "empty": ([], "collection 'traces') is empty"),
        # the store holds RL's questions, the warm start's collection beside it is missing
        "missing_warm_start": (["--retrieve_prob", "0", "--sft_warmup_steps", "1", "--task", "word_problems",
                                "--train_split", "reward_only", "--demo_split", "demonstrated",
                                "--store_split", "reward_only"], "no collection 'traces-warm-start'"),
    }
    _answers_in_a_fresh_process(cases, ["--config", str(config)], tmp_path)
