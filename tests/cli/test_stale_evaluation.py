"""A model trained again in an output_dir that `rapo eval` scored before: the earlier model's results go with it."""

from __future__ import annotations

import json

from rapo_trl.cli import parse_recipe


def test_a_run_trained_again_drops_the_evaluation_of_the_model_it_replaced(tiny_model_dir, tmp_path, capsys):
    # Left in output_dir, the earlier model's eval_results.json was drawn as this run's pass@1 in its plots, and
    # `rapo push` uploaded it (and its .md table) beside the new model, whose card says it is not evaluated yet.
    from rapo_trl.cli import train
    from tests.cli.conftest import recipe, write_yaml

    out = tmp_path / "model"
    out.mkdir()
    earlier = {"task": "arithmetic", "split": "eval", "n": 2, "rows": {"trained": {"pass@1": 0.9}}}
    (out / "eval_results.json").write_text(json.dumps(earlier))
    (out / "eval_results.md").write_text("# Evaluation\n\n| trained | 0.900 |\n")
    config = {**recipe(tiny_model_dir, tmp_path), "output_dir": str(out), "retrieve_prob": 0.0}
    train.run(*parse_recipe("train", ["--config", str(write_yaml(tmp_path / "r.yaml", config))]))
    assert (out / "adapter_model.safetensors").is_file() and (out / "plots").is_dir()
    assert not (out / "eval_results.json").exists() and not (out / "eval_results.md").exists()
    assert "Not evaluated yet" in (out / "README.md").read_text()
    assert "Removed eval_results.json, eval_results.md" in capsys.readouterr().out
