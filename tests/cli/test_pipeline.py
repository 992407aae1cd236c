"""End to end on the tiny model: build a store, look inside it, train (LoRA with retrieval, full
fine-tune without a store), evaluate beside the base model; each step is the real `rapo` command."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rapo_trl.cli import parse_recipe
from rapo_trl.cli.common import load_questions
from rapo_trl.cli.run_record import question_hashes
from tests.cli.runs import describe

pytestmark = pytest.mark.slow

METRICS = ("pass@1", "f1", "em", "format_ok", "tool_calls")


@pytest.mark.rapo_runs("build-store")
def test_build_store_fills_the_store(cli_runs, cli_work):
    _, base = cli_work
    run = cli_runs["build-store"]
    assert run.returncode == 0, describe(run)
    match = re.search(r"Added (\d+) step records; the store now holds (\d+) records from (\d+) questions", run.stdout)
    assert match, describe(run)
    added, records, questions = map(int, match.groups())
    assert added == records > 0
    assert questions == base["train_size"]
    assert f"Building the store from {base['train_size']} questions (task=arithmetic, train: " in run.stdout
    assert (Path(base["store_path"]) / "chroma.sqlite3").is_file()


@pytest.mark.rapo_runs("build-store", "store-stats")
def test_store_stats_reports_the_records(cli_runs, cli_work):
    _, base = cli_work
    built = cli_runs["build-store"]
    run = cli_runs["store-stats"]
    assert run.returncode == 0, describe(run)
    stats = json.loads(run.stdout)
    records = int(re.search(r"holds (\d+) records", built.stdout).group(1))
    assert stats["records"] == records
    assert stats["questions"] == base["train_size"]
    # keep_top_k 1 of num_samples 2: one trajectory per question, every record from the expert
    assert stats["trajectories"] == base["train_size"]
    assert stats["sources"] == {"agent:expert": records}
    assert sum(stats["reward_histogram"]["counts"]) == records
    assert stats["reward_mean"] > 0
    assert stats["dimension"] > 0


@pytest.mark.rapo_runs("store-query")
def test_store_query_returns_a_stored_step(cli_runs):
    run = cli_runs["store-query"]
    assert run.returncode == 0, describe(run)
    found = json.loads(run.stdout)
    # the first step of the queried question itself: its key is the question, so it is the top hit
    assert found["fallback"] is False
    assert found["record_id"] and found["question_id"]
    assert found["similarity"] > 0.8
    assert found["reward"] > 0
    assert "<python>" in found["text"] and "<result>" in found["text"]


@pytest.mark.rapo_runs("train-lora")
def test_train_lora_with_retrieval_saves_an_adapter(cli_runs, cli_work):
    _, base = cli_work
    run = cli_runs["train-lora"]
    assert run.returncode == 0, describe(run)
    assert re.search(r"Trained 1 steps in [\d.]+s", run.stdout), describe(run)
    out = Path(base["output_dir"])
    adapter = json.loads((out / "adapter_config.json").read_text())
    assert Path(adapter["base_model_name_or_path"]) == Path(base["model_name_or_path"])
    assert adapter["r"] == base["lora_r"]
    assert (out / "adapter_model.safetensors").is_file()
    assert not (out / "model.safetensors").exists()
    # what `rapo eval` evaluates by default: the tools and protocol the run trained with
    record = json.loads((out / "rapo_run.json").read_text())
    trained_on = record.pop("trained_question_hashes")
    # the store it retrieved from: its questions are not held out either
    assert record.pop("store_collections") and record.pop("store_key_max_chars")
    assert set(record.pop("store_question_hashes")) & set(trained_on)
    assert re.fullmatch(r"[0-9a-f]{32}", record.pop("run_id"))  # a new run: an id of its own
    assert record == {
        "task": "arithmetic", "tools": ["python"], "tool_protocol": "tags", "environment_factory": None,
        "base_model": str(Path(base["model_name_or_path"]).resolve()), "baselines": [],  # no baseline beside it
        "finished": True}  # it saved its model: rapo eval scores it
    # the questions it trained on, which rapo eval refuses to ask
    assert set(trained_on) == question_hashes(load_questions(parse_recipe("train", ["--config", str(
        cli_work[0] / "recipe.yaml")])[0], "train")["question"])
    # the hybrid rollouts could retrieve: RAPO's metrics were logged
    assert re.search(r"'rapo/retrieve_prob': '?1(\.0)?'?[,}]", run.stdout), describe(run)


@pytest.mark.rapo_runs("train-full")
def test_train_full_fine_tune_needs_no_store_when_p_is_zero_and_adds_closeness(cli_runs, cli_work):
    work, _ = cli_work
    run = cli_runs["train-full"]
    assert run.returncode == 0, describe(run)
    out = work / "model-full"
    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()
    assert not (out / "adapter_config.json").exists()
    assert not (work / "never-built").exists()
    assert re.search(r"'rapo/retrieve_prob': '?0(\.0)?'?[,}]", run.stdout), describe(run)
    # --closeness_weight added numeric closeness to the training reward, logged beside the outcome reward
    assert "'rewards/numeric_closeness_reward/mean'" in run.stdout, describe(run)
    assert "'rewards/rapo_outcome_reward/mean'" in run.stdout, describe(run)


@pytest.mark.rapo_runs("eval")
def test_eval_prints_base_and_trained_side_by_side(cli_runs, cli_work):
    _, base = cli_work
    run = cli_runs["eval"]
    assert run.returncode == 0, describe(run)
    rows = {}
    for line in run.stdout.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if cells[0].startswith("model"):
            assert cells[1:] == ["pass@1", "95% CI", *METRICS[1:]], line
        elif cells[0] in ("base", "trained"):
            rows[cells[0]] = cells[1:]
    assert set(rows) == {"base", "trained"}, describe(run)

    out = Path(base["output_dir"])
    saved = json.loads((out / "eval_results.json").read_text())
    assert saved["task"] == "arithmetic" and saved["n"] == base["eval_size"]
    assert (saved["tools"], saved["tool_protocol"]) == (["python"], "tags")  # the trained ones, recorded
    assert len(saved["question_ids"]) == base["eval_size"] == len(set(saved["question_ids"]))
    assert list(saved["rows"]) == ["base", "trained"]
    assert "| trained |" in (out / "eval_results.md").read_text()
    for name, printed in rows.items():
        metrics = saved["rows"][name]
        assert printed[0] == f"{metrics['pass@1']:.3f} ({metrics['correct']}/{base['eval_size']})"
        lo, hi = metrics["pass@1_ci95"]
        assert printed[1] == f"{lo:.3f}-{hi:.3f}" and lo <= metrics["pass@1"] <= hi
        assert [f"{metrics[m]:.3f}" for m in METRICS[1:]] == printed[2:]
        assert all(0.0 <= metrics[m] <= 1.0 for m in METRICS if m != "tool_calls")
        assert len(saved["samples"][name]) == min(3, base["eval_size"])
