"""RAPO's model card (paper, authors, tags, base model by hub id, recipe, eval table) and the warning
given when training starts with nothing to retrieve."""

from __future__ import annotations

import json
import logging
import re
import sys
import types

import pytest
import yaml
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer

from rapo_trl.config import RAPOConfig
from rapo_trl.embeddings import HashingEmbedder
from rapo_trl.model_card import SMOLLM2_HUB_ID, add_evaluation, base_model_hub_id, dataset_hub_id
from rapo_trl.store import TraceStore
from rapo_trl.trainer import RAPOTrainer
from rapo_trl.trainer.checks import warn_if_nothing_to_retrieve
from tests.helpers.fakes import EchoTool
from tests.helpers.trainers import common_args, dataset, rapo_trainer, script, sevens
from tests.helpers.user_modules import import_fresh

EVALUATION = {"task": "arithmetic", "n": 16, "results": {"base": {"pass@1": 0.125, "format_ok": 0.5},
                                                          "trained": {"pass@1": 0.25, "format_ok": 0.75}}}


def _front_matter(text: str) -> dict:
    _, header, _ = text.split("---\n", 2)
    return yaml.safe_load(header)


def test_base_model_hub_id(tmp_path, tiny_model_dir):
    assert base_model_hub_id("smollm2") == SMOLLM2_HUB_ID
    assert base_model_hub_id("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    assert base_model_hub_id("tiny") is None and base_model_hub_id(None) is None
    assert base_model_hub_id(tiny_model_dir) is None  # built from a config: no hub id to name
    assert base_model_hub_id(tmp_path / "missing" / "model") is None
    smol = tmp_path / "SmolLM2-135M-Instruct"
    smol.mkdir()
    assert base_model_hub_id(smol) == SMOLLM2_HUB_ID
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "config.json").write_text(json.dumps({"_name_or_path": "org/some-model"}))
    assert base_model_hub_id(saved) == "org/some-model"


def test_dataset_hub_id_names_a_hub_dataset_and_no_local_one(tmp_path, monkeypatch):
    assert dataset_hub_id("openai/gsm8k") == "openai/gsm8k"
    assert dataset_hub_id(None) is None
    (tmp_path / "org" / "saved").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert dataset_hub_id("org/saved") is None  # a folder here, though it reads as a Hub id
    assert dataset_hub_id(str(tmp_path / "org" / "saved")) is None
    assert dataset_hub_id("qa.jsonl") is None and dataset_hub_id("./org/qa.jsonl") is None


def test_lora_card_has_paper_authors_tags_base_model_recipe_and_eval(tiny_model_dir, tmp_path):
    store = TraceStore(tmp_path / "store", embedder=HashingEmbedder(64))
    args = RAPOConfig(**common_args(tmp_path / "out", num_hybrid_generations=2, retrieve_prob=0.5),
                      max_turn_tokens=32)
    trainer = RAPOTrainer(
        AutoModelForCausalLM.from_pretrained(tiny_model_dir), sevens, args=args, train_dataset=dataset(),
        processing_class=AutoTokenizer.from_pretrained(tiny_model_dir), trace_store=store, tools=[EchoTool()],
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    )
    trainer.base_model_id = "Qwen/Qwen2.5-0.5B-Instruct"
    trainer.save_model()  # PEFT writes its own template first; RAPO's card replaces it
    text = (tmp_path / "out" / "README.md").read_text()
    meta = _front_matter(text)
    assert meta["base_model"] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert meta["library_name"] == "peft"
    assert {"rapo", "trl", "lora", "arxiv:2603.03078"} <= set(meta["tags"])
    assert "Siwei Zhang and Yun Xiong and Xi Chen and Zi'an Jia and Renhong Huang and Jiarong Xu and Jiawei Zhang" \
        in text
    assert "huggingface.co/papers/2603.03078" in text
    assert "| `num_hybrid_generations` | 2 |" in text and "| `retrieve_prob` | 0.5 |" in text
    assert "r=4, alpha=8, targets=['q_proj', 'v_proj']" in text
    assert "| tools | python |" in text
    assert "0 step records, embedder hashing-bow-64" in text
    assert "Not evaluated yet" in text

    add_evaluation(tmp_path / "out", EVALUATION)
    text = (tmp_path / "out" / "README.md").read_text()
    assert "| trained | 0.250 | 0.750 |" in text and "| base | 0.125 | 0.500 |" in text
    assert "Not evaluated yet" not in text and text.count("## Evaluation") == 1
    add_evaluation(tmp_path / "out", {**EVALUATION, "n": 32})  # replaced, not appended
    text = (tmp_path / "out" / "README.md").read_text()
    assert text.count("## Evaluation") == 1 and "32 questions" in text


def test_eval_table_reads_rapo_evals_rows_with_intervals(tmp_path):
    payload = {"task": "word_problems", "split": "heldout_templates", "n": 64, "rows": {
        "base": {"pass@1": 0.0, "pass@1_ci95": [0.0, 0.0564], "format_ok": 0.1},
        "warm_start": {"pass@1": 0.125, "pass@1_ci95": [0.0648, 0.2276], "format_ok": 1.0},
        "trained": {"pass@1": 0.25, "pass@1_ci95": [0.16, 0.37], "format_ok": 1.0}}}
    text = add_evaluation(tmp_path, payload).read_text()
    assert "| model | pass@1 | 95% CI | format_ok |" in text
    assert "| warm_start | 0.125 | 0.065-0.228 | 1.000 |" in text and "(heldout_templates), 64 questions" in text


def test_eval_table_has_one_table_per_eval_set_with_mean_at_k(tmp_path):
    stories = {"warm_start": {"pass@1": 0.1, "mean@k": 0.05, "format_ok": 1.0},
               "trained": {"pass@1": 0.2, "mean@k": 0.25, "format_ok": 1.0}}
    shapes = {"warm_start": {"pass@1": 0.0, "format_ok": 1.0}, "trained": {"pass@1": 0.0, "format_ok": 1.0}}
    payload = {"task": "word_problems", "split": "heldout_stories", "n": 32, "k": 4, "rows": stories,
               "sets": {"heldout_stories": {"n": 32, "rows": stories}, "heldout_shapes": {"n": 16, "rows": shapes}}}
    text = add_evaluation(tmp_path, payload).read_text()
    assert "(heldout_stories), 32 questions" in text and "(heldout_shapes), 16 questions" in text
    assert "4 samples per question" in text
    assert "| model | pass@1 | mean@k | format_ok |" in text and "| trained | 0.200 | 0.250 | 1.000 |" in text
    assert "| model | pass@1 | format_ok |" in text  # the greedy-only set has no mean@k column


def test_eval_table_says_what_mean_at_k_is_over_as_eval_sampled_it(tmp_path):
    # rapo eval with eval_sample_size 8 and eval_temperature 0.6, and a second set left greedy (eval_sampled_splits)
    sampled = {"trained": {"pass@1": 0.5, "mean@k": 0.4, "k": 4, "questions": 8, "temperature": 0.6}}
    greedy = {"trained": {"pass@1": 0.1}}
    payload = {"task": "arithmetic", "split": "eval", "n": 32, "k": 4, "rows": sampled,
               "sets": {"eval": {"n": 32, "rows": sampled}, "other": {"n": 16, "rows": greedy}}}
    text = add_evaluation(tmp_path, payload).read_text()
    assert "(eval), 32 questions, greedy decoding (mean@k: 4 samples per question of the first 8 at T=0.6)." in text
    assert "(other), 16 questions, greedy decoding.\n" in text
    assert "training temperature" not in text


def test_eval_table_names_the_sampling_settings_mean_at_k_left_off_their_defaults(tmp_path):
    # a recipe sampling with top_p 0.9 and a generation option: its mean@k is not comparable with a plain T=0.6 one
    sampled = {"trained": {"pass@1": 0.5, "mean@k": 0.4, "k": 4, "questions": 32, "temperature": 0.6, "top_p": 0.9,
                           "top_k": 0, "min_p": None, "repetition_penalty": 1.0,
                           "generation_options": {"typical_p": 0.95}}}
    payload = {"task": "arithmetic", "split": "eval", "n": 32, "k": 4, "rows": sampled}
    text = add_evaluation(tmp_path, payload).read_text()
    assert "(mean@k: 4 samples per question at T=0.6, top_p=0.9, typical_p=0.95)." in text


def test_eval_table_names_only_the_temperature_of_mean_at_k_at_default_settings(tmp_path):
    sampled = {"trained": {"pass@1": 0.5, "mean@k": 0.4, "k": 4, "questions": 32, "temperature": 1.0, "top_p": 1.0,
                           "top_k": 0, "min_p": None, "repetition_penalty": 1.0}}
    payload = {"task": "arithmetic", "split": "eval", "n": 32, "k": 4, "rows": sampled}
    text = add_evaluation(tmp_path, payload).read_text()
    assert "(mean@k: 4 samples per question at T=1.0)." in text


def test_eval_table_is_appended_to_a_card_without_one(tmp_path):
    (tmp_path / "README.md").write_text("---\nlibrary_name: peft\n---\n# Some adapter\n")
    add_evaluation(tmp_path, EVALUATION)
    text = (tmp_path / "README.md").read_text()
    assert text.startswith("---\nlibrary_name: peft") and "| trained | 0.250 |" in text


def test_training_with_an_empty_store_warns_once(tiny_model_dir, tmp_path, caplog):
    store = TraceStore(tmp_path / "store", embedder=HashingEmbedder(64))
    trainer = rapo_trainer(tiny_model_dir, tmp_path / "out", store=store, num_hybrid_generations=2,
                           retrieve_prob=1.0, max_steps=1)
    script(trainer)
    with caplog.at_level(logging.WARNING, logger="rapo_trl.trainer"):
        trainer.train()
    warnings = [r.getMessage() for r in caplog.records if "is empty" in r.getMessage()]
    assert len(warnings) == 1 and "fallback text" in warnings[0]


def warn_if_nothing_to_retrieve_of(trainer):
    warn_if_nothing_to_retrieve(trainer.args, trainer.trace_store)


def test_hybrid_rollouts_without_a_store_warn_and_p_zero_does_not(tiny_model_dir, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="rapo_trl.trainer"):
        warn_if_nothing_to_retrieve_of(rapo_trainer(tiny_model_dir, tmp_path / "a", num_hybrid_generations=2,
                     retrieve_prob=0.5))
        warn_if_nothing_to_retrieve_of(rapo_trainer(tiny_model_dir, tmp_path / "b", num_hybrid_generations=2,
                     retrieve_prob=0.0))
    # The helper's prompts teach no tool tag, which the trainer also warns about; that warning is not counted here.
    messages = [r.getMessage() for r in caplog.records if r.name == "rapo_trl.trainer" and "teach" not in r.getMessage()]
    assert len(messages) == 1 and "no trace_store" in messages[0]


def _quick_start_code(text: str) -> str:
    found = re.search(r"^## Quick start\n.*?^```python\n(.*?)^```", text, re.S | re.M)
    assert found, "the card has no python quick start"
    return found.group(1)


def test_card_of_a_local_base_runs_its_agent_with_tools_and_links_the_tracker(tiny_model_dir, tmp_path, monkeypatch,
                                                                               capsys):
    """No "[None](https://huggingface.co/None)" for a local base; a quick start that runs the tools
    (executed here on the saved model); the tracker run's link, as TRL's trainers give it."""
    run = types.SimpleNamespace(url="https://wandb.ai/me/rapo/runs/abc123")
    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(run=run))  # a started run, offline
    trainer = rapo_trainer(tiny_model_dir, tmp_path / "out")
    trainer.save_model()
    text = (tmp_path / "out" / "README.md").read_text()
    assert "[None]" not in text and "huggingface.co/None" not in text
    assert f"fine-tuned version of a local model (`{tiny_model_dir.name}`, no Hub id)" in text
    assert "https://wandb.ai/me/rapo/runs/abc123" in text
    code = _quick_start_code(text)
    assert "pipeline(" not in code and "tools = [PythonTool()]" in code and "RolloutAgent.from_pretrained" in code
    code = code.replace('"out"', repr(str(tmp_path / "out"))).replace("max_completion_length=512",
                                                                      "max_completion_length=16")
    exec(compile(code, "model card", "exec"), {})  # noqa: S102 - the card's own snippet
    assert capsys.readouterr().out.strip()  # it printed the agent's trajectory


def test_quick_start_imports_every_tool_it_names(tmp_path, monkeypatch):
    """A tool of the user's own is imported from its module in the card's snippet (a snippet must not name a
    function it never imports); the search tool's passages are loaded there too."""
    from rapo_trl.model_card import _quick_start
    from rapo_trl.tools import FunctionTool, PythonTool

    (tmp_path / "my_tools.py").write_text('def double(x: int) -> int:\n    """Double it.\n\n    Args:\n'
                                          '        x: a number\n    """\n    return 2 * x\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    import_fresh(monkeypatch, "my_tools")
    from my_tools import double

    trainer = types.SimpleNamespace(rapo_tools=[PythonTool(), FunctionTool(double)])
    text = _quick_start("## Quick start\n\n```python\nfrom transformers import pipeline\n```\n\n", "me/run", trainer)
    code = _quick_start_code(text)
    assert "from my_tools import double" in code and "tools = [PythonTool(), double]" in code
    setup = code.split("agent = ")[0]  # the imports and the tools: every name defined, nothing loaded
    namespace: dict = {}
    exec(compile(setup, "model card", "exec"), namespace)  # noqa: S102 - the card's own snippet
    assert [getattr(tool, "tag", getattr(tool, "__name__", None)) for tool in namespace["tools"]] == ["python", "double"]


@pytest.mark.parametrize("own_prompt", [None, "You solve problems.\nCall <python>...</python>; answer in \\boxed{}.",
                                        'Answers go in <answer></answer>. Say "done"'])
def test_quick_start_prompts_with_the_system_prompt_the_model_trained_with(own_prompt):
    """A run whose rows carry a system prompt of the user's own gets a quick start that prompts with that text (the
    model answers best to the prompt it trained with); rows with the tools' own prompt keep `system_prompt_for`."""
    from rapo_trl import system_prompt_for
    from rapo_trl.model_card import _quick_start
    from rapo_trl.tools import PythonTool

    tools = [PythonTool()]
    system = system_prompt_for(tools) if own_prompt is None else own_prompt
    rows = [{"prompt": [{"role": "system", "content": system}, {"role": "user", "content": "What is 2 + 3?"}]}]
    trainer = types.SimpleNamespace(rapo_tools=tools, train_dataset=rows)
    code = _quick_start_code(_quick_start("## Quick start\n\n```python\nx = 1\n```\n\n", "me/run", trainer))
    namespace: dict = {}
    exec(compile(code.split("agent = ")[0], "model card", "exec"), namespace)  # noqa: S102 - the card's own snippet
    prompt_line = next(line for line in code.splitlines() if line.startswith("prompt = "))
    if own_prompt is None:
        assert '"content": system_prompt_for(tools)' in prompt_line and "system_prompt" not in namespace
    else:
        assert '"content": system_prompt}' in prompt_line and namespace["system_prompt"] == own_prompt


def test_card_of_a_json_tool_run_runs_its_agent_on_the_environment_and_tools(tiny_model_dir, tmp_path, capsys):
    """A policy trained on JSON tool calls (an environment and a standalone tool) gets a quick start that runs it on
    that environment with that tool, not a tag agent without tools."""
    from tests.helpers.environments import Counter, multiply

    args = RAPOConfig(**common_args(tmp_path / "out", max_completion_length=64), max_turn_tokens=32, retrieve_prob=0.0)
    trainer = RAPOTrainer(AutoModelForCausalLM.from_pretrained(tiny_model_dir), sevens, args=args,
                          train_dataset=dataset(), processing_class=AutoTokenizer.from_pretrained(tiny_model_dir),
                          environment_factory=Counter, tools=[multiply])
    trainer.save_model()
    text = (tmp_path / "out" / "README.md").read_text()
    assert "| environment | Counter |" in text and "| tools | multiply | JSON tool calls" in text
    code = _quick_start_code(text).replace('"out"', repr(str(tmp_path / "out"))).replace(
        "max_completion_length=512", "max_completion_length=16")
    namespace: dict = {}
    exec(compile(code, "model card", "exec"), namespace)  # noqa: S102 - the card's own snippet
    agent = namespace["agent"]
    assert agent.environment_factory is Counter and list(agent.tools) == ["multiply"]
    assert agent.engine.config.tool_protocol == "json"
    assert capsys.readouterr().out.strip()  # it printed the episode's messages


def test_push_to_hub_keeps_the_eval_table_of_the_model_it_pushes(tiny_model_dir, tmp_path, monkeypatch):
    """`add_evaluation` then `trainer.push_to_hub()`: the push saves the model again, and the card it uploads keeps
    the table of that model. A model trained further, or another trainer in the same folder, gets no table (its
    scores are of another model)."""
    import transformers.trainer

    uploaded = []
    hub = types.SimpleNamespace(upload_folder=lambda **kw: uploaded.append(
        (transformers.trainer.Path(kw["folder_path"]) / "README.md").read_text()))
    monkeypatch.setattr(transformers.trainer, "hf_api", lambda: hub)
    out = tmp_path / "out"
    trainer = rapo_trainer(tiny_model_dir, out)
    trainer.hub_model_id = "me/out"  # the repo exists: nothing to create
    trainer.save_model()
    add_evaluation(out, EVALUATION)
    trainer.push_to_hub()
    assert "| trained | 0.250 | 0.750 |" in uploaded[-1] and "Not evaluated yet" not in uploaded[-1]
    assert uploaded[-1].count("## Evaluation") == 1

    trainer.state.global_step += 1  # trained further: the table scored the model before
    trainer.push_to_hub()
    assert "Not evaluated yet" in uploaded[-1] and "| trained | 0.250" not in uploaded[-1]

    add_evaluation(out, EVALUATION)
    other = rapo_trainer(tiny_model_dir, out)  # another model saved in the same folder
    other.save_model()
    assert "Not evaluated yet" in (out / "README.md").read_text()


def test_the_recipe_says_how_long_the_model_trained(tiny_model_dir, tmp_path):
    """A run by epochs has max_steps -1, which the card gave as "-1 optimizer steps": it names the epochs, and every
    card the steps the model was trained."""
    trainer = rapo_trainer(tiny_model_dir, tmp_path / "epochs", num_train_epochs=2)
    trainer.state.global_step = 3
    trainer.save_model()
    text = (tmp_path / "epochs" / "README.md").read_text()
    assert "| `max_steps` | -1 |" not in text
    assert "| `max_steps` | none (num_train_epochs=2) |" in text and "| steps trained | 3 |" in text
    rapo_trainer(tiny_model_dir, tmp_path / "steps", max_steps=5).save_model()
    text = (tmp_path / "steps" / "README.md").read_text()
    assert "| `max_steps` | 5 |" in text and "| steps trained | 0 |" in text
