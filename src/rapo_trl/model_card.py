"""RAPO's model card: TRL's trainer card (paper, tags, citation) plus the recipe and the eval table.

``RAPOTrainer.create_model_card`` writes it to ``output_dir/README.md``; ``rapo train`` calls it after
saving (replacing PEFT's adapter template), and ``add_evaluation`` puts ``rapo eval``'s table in an
existing card. The base model is named by its hub id, also when it was loaded from a local folder
(``base_model_hub_id``).
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

SMOLLM2_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
MODEL_ALIAS_HUB_IDS = {"smollm2": SMOLLM2_HUB_ID, "tiny": None}
EVAL_START, EVAL_END = "<!-- rapo-eval -->", "<!-- /rapo-eval -->"
EVAL_COLUMNS = ("pass@1", "mean@k", "f1", "em", "format_ok", "tool_calls")

# RAPOConfig fields shown in the card's recipe table, with what they mean.
RECIPE_FIELDS = (
    ("num_generations", "rollouts per question (G)"),
    ("num_hybrid_generations", "hybrid rollouts per group (may retrieve)"),
    ("retrieve_prob", "retrieval probability at a step boundary (p)"),
    ("retrieve_prob_final", "p at the last step, decayed to linearly (None: constant p)"),
    ("retrieve_at", "where hybrid rollouts retrieve (tool_step: the paper)"),
    ("retrieve_own_question", "retrieve among the row's own question's records where the store has them"),
    ("retrieve_failed_groups_max_reward", "retrieve only in groups whose on-policy rewards are all at or below this (None: every group)"),
    ("retrieved_token_loss_weight", "loss weight on retrieved steps' own tokens (0: masked, the paper)"),
    ("retrieved_token_credit", "what weights that loss: the row's positive advantage, or the stored trajectory's reward"),
    ("advantage_baseline", "rows whose reward mean and std make the advantage (group: every row, the paper)"),
    ("retrieval_advantage_weight", "retrieval-reward weight on the advantage (a)"),
    ("importance_shaping_weight", "importance shaping weight (m)"),
    ("step_entropy", "step entropy estimator"),
    ("loss_type", "loss aggregation"),
    ("epsilon", "clip low"),
    ("epsilon_high", "clip high"),
    ("delta", "dual clip"),
    ("beta", "KL coefficient"),
    ("learning_rate", "learning rate"),
    ("max_steps", "optimizer steps asked for"),
    ("max_completion_length", "completion budget (tokens)"),
    ("max_turn_tokens", "tokens per step"),
    ("max_tool_calls", "tool calls per rollout"),
    ("temperature", "sampling temperature"),
)

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")

RAPO_PAPER = {
    "title": "RAPO: Expanding Exploration for LLM Agents via Retrieval-Augmented Policy Optimization",
    "id": "2603.03078",
    # docstyle-ignore
    "citation": textwrap.dedent("""\
        @misc{zhang2026rapo,
            title         = {{RAPO: Expanding Exploration for LLM Agents via Retrieval-Augmented Policy Optimization}},
            author        = {Siwei Zhang and Yun Xiong and Xi Chen and Zi'an Jia and Renhong Huang and Jiarong Xu and Jiawei Zhang},
            year          = 2026,
            eprint        = {2603.03078},
            archivePrefix = {arXiv},
            primaryClass  = {cs.AI},
        }"""),
}
"""The paper, as TRL's model card cites it (``RAPOTrainer._paper``)."""


def base_model_hub_id(name_or_path) -> str | None:
    """The hub id of a model given by alias, hub id or local folder; ``None`` when it has none.

    A local folder is named by the ``_name_or_path`` in its config when that is a hub id, and the
    folder ``rapo_trl.models.smollm2_path()`` converts is SmolLM2-135M-Instruct.
    """
    if name_or_path is None:
        return None
    name = str(name_or_path)
    if name in MODEL_ALIAS_HUB_IDS:
        return MODEL_ALIAS_HUB_IDS[name]
    folder = Path(name).expanduser()
    if not folder.is_dir():
        return name if _HUB_ID.match(name) else None
    from rapo_trl.models import SMOLLM2_FOLDER_NAME

    if folder.name == SMOLLM2_FOLDER_NAME:
        return SMOLLM2_HUB_ID
    config = folder / "config.json"
    if config.is_file():
        try:
            recorded = json.loads(config.read_text()).get("_name_or_path")
        except (json.JSONDecodeError, AttributeError):
            recorded = None
        if isinstance(recorded, str) and _HUB_ID.match(recorded) and not Path(recorded).exists():
            return recorded
    return None


def dataset_hub_id(name_or_path) -> str | None:
    """The Hub id of the dataset a run trained on (``dataset_name``), or ``None``: a local file or folder has none,
    and the card's metadata and TRL's link to ``huggingface.co/datasets/`` take Hub ids only."""
    if name_or_path is None:
        return None
    name = str(name_or_path)
    return name if _HUB_ID.match(name) and not Path(name).expanduser().exists() else None


def recipe_table(trainer) -> str:
    """Markdown: the RAPO settings this model was trained with, then the adapter, tools and store."""
    args = trainer.args
    lines = ["| setting | value | meaning |", "|---|---|---|"]
    for field, meaning in RECIPE_FIELDS:
        if hasattr(args, field):
            lines.append(f"| `{field}` | {_recipe_value(args, field)} | {meaning} |")
    step = getattr(getattr(trainer, "state", None), "global_step", None)
    if step is not None:
        lines.append(f"| steps trained | {step} | optimizer steps taken when this card was written |")
    peft_config = getattr(getattr(trainer, "model", None), "peft_config", None)
    if peft_config:
        config = next(iter(peft_config.values()))
        targets = config.target_modules
        targets = sorted(targets) if isinstance(targets, (set, list, tuple)) else targets
        lines.append(f"| LoRA | r={config.r}, alpha={config.lora_alpha}, targets={targets} | PEFT adapter |")
    lines += _tools_rows(trainer)
    store = getattr(trainer, "trace_store", None)
    if store is not None:
        embedder = getattr(getattr(store, "embedder", None), "name", "?")
        size = _record_count(store)
        lines.append(f"| trace store | {size} step records, embedder {embedder} | retrieved in hybrid rollouts |")
    return "\n".join(lines)


def _recipe_value(args, field: str):
    """A setting as the recipe table shows it: ``max_steps`` at -1 (or 0) sets no step count, the epochs do."""
    value = getattr(args, field)
    if field == "max_steps" and isinstance(value, int) and value <= 0:
        epochs = getattr(args, "num_train_epochs", None)
        return f"none (num_train_epochs={epochs:g})" if isinstance(epochs, (int, float)) else "none"
    return value


def _tools_rows(trainer) -> list[str]:
    """The recipe rows naming the tools: tag tools, or the environment and tools of JSON tool calls."""
    if getattr(trainer, "tool_protocol", "tags") != "json":
        tags = [getattr(tool, "tag", type(tool).__name__) for tool in getattr(trainer, "rapo_tools", [])]
        return [f"| tools | {', '.join(tags)} | tag tools the policy calls |"] if tags else []
    rows = []
    factories = getattr(trainer, "environment_factories", None) or {}
    names = [getattr(factory, "__name__", type(factory).__name__) for factory in factories.values()]
    if names:
        rows.append(f"| environment | {', '.join(names)} | its methods are JSON tools, one environment per rollout |")
    tools = [getattr(tool, "__name__", type(tool).__name__) for tool in getattr(trainer, "_standalone_tools", None) or []]
    if tools:
        rows.append(f"| tools | {', '.join(tools)} | JSON tool calls in the chat template's format |")
    return rows


def _record_count(store) -> int | str:
    """The store's record count, or "?": a card is written at every checkpoint, also while a store server is down."""
    try:
        return len(store)
    except Exception:  # noqa: BLE001 - e.g. a connection refused; the checkpoint matters more than the count
        return "?"


def evaluation_table(evaluation: dict) -> str:
    """Markdown of a ``rapo eval`` result (``eval_results.json``): one row per model, one table per eval set."""
    sets = evaluation.get("sets")
    if isinstance(sets, dict) and sets:
        return "\n\n".join(_set_table({**evaluation, "split": name, "n": values.get("n"), "rows": values.get("rows", {})})
                           for name, values in sets.items())
    return _set_table(evaluation)


def _set_table(evaluation: dict) -> str:
    from rapo_trl.plots import evaluation_rows

    results = evaluation_rows(evaluation)
    columns = [c for c in EVAL_COLUMNS if any(c in metrics for metrics in results.values())]
    split = f" ({evaluation['split']})" if evaluation.get("split") else ""
    head = f"Held-out evaluation with tools and without retrieval: task `{evaluation.get('task', '?')}`{split}, " \
           f"{evaluation.get('n', '?')} questions, greedy decoding{_sampling_note(results, evaluation)}.\n\n"
    with_ci = any(isinstance(m.get("pass@1_ci95"), (list, tuple)) for m in results.values())
    header = [*columns[:1], *(["95% CI"] if with_ci and columns[:1] == ["pass@1"] else []), *columns[1:]]
    lines = ["| model | " + " | ".join(header) + " |", "|---" * (len(header) + 1) + "|"]
    for name, metrics in results.items():
        cells = [f"{metrics[c]:.3f}" if isinstance(metrics.get(c), (int, float)) else "" for c in columns]
        if len(header) > len(columns):
            interval = metrics.get("pass@1_ci95")
            cells.insert(1, f"{interval[0]:.3f}-{interval[1]:.3f}" if isinstance(interval, (list, tuple)) else "")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return head + "\n".join(lines)


def _sampling_note(results: dict, evaluation: dict) -> str:
    """What a set's mean@k is over, read from its sampled rows as ``rapo eval``'s table title reads it: the questions
    (``eval_sample_size`` may keep them below the set's n) and the sampling settings by `sampling_label` (the
    temperature, ``eval_temperature``'s where set, and each setting off its default); ``""`` where no model of the set
    was sampled (``eval_sampled_splits`` left it greedy)."""
    from rapo_trl.evaluation import sampling_label

    sampled = next((m for m in results.values() if isinstance(m.get("mean@k"), (int, float))), None)
    k = (sampled or {}).get("k", evaluation.get("k"))
    if sampled is None or not k:
        return ""
    questions, n = sampled.get("questions"), evaluation.get("n")
    over = f" of the first {questions}" if isinstance(questions, int) and isinstance(n, int) and questions < n else ""
    # Files that did not record the temperature did not record the other settings either.
    at = sampling_label(sampled) if sampled.get("temperature") is not None else "the training temperature"
    return f" (mean@k: {k} samples per question{over} at {at})"


def _evaluation_section(evaluation: dict | None) -> str:
    body = evaluation_table(evaluation) if evaluation else "Not evaluated yet (`rapo eval` adds the table here)."
    return f"## Evaluation\n\n{EVAL_START}\n{body}\n{EVAL_END}\n"


def build_model_card(trainer, model_name=None, dataset_name=None, tags=None, base_model=None,
                     evaluation: dict | None = None):
    """A ``huggingface_hub.ModelCard``: TRL's card for this trainer with RAPO's sections added."""
    from trl.trainer.utils import generate_model_card, get_config_model_id

    if base_model is None:
        base_model = getattr(trainer, "base_model_id", None) or base_model_hub_id(
            get_config_model_id(trainer.model.config)
        )
    dataset_name = dataset_name or getattr(trainer, "dataset_id", None)
    is_adapter = bool(getattr(trainer.model, "peft_config", None))
    tags = [tags] if isinstance(tags, str) else list(tags or [])
    tags = list(dict.fromkeys([*trainer._tag_names, *tags, *(["lora", "peft"] if is_adapter else []),
                               f"arxiv:{trainer._paper['id']}"]))
    hub_model_id = getattr(trainer, "hub_model_id", None) or trainer.args.hub_model_id
    model_name = model_name or (hub_model_id or "").split("/")[-1] or Path(trainer.args.output_dir).name
    trackers = tracker_urls()
    if trackers["trackio_url"]:  # TRL tags the card with the run's Trackio Space, as its own trainers do
        tags = [tag for tag in tags if not tag.startswith("trackio:")] + [f"trackio:{trackers['trackio_url']}"]
    card = generate_model_card(
        base_model=base_model,
        model_name=model_name,
        hub_model_id=hub_model_id or model_name,
        dataset_name=dataset_name,
        tags=tags,
        **trackers,
        trainer_name=trainer._name,
        trainer_citation=trainer._paper.get("citation"),
        paper_title=trainer._paper.get("title"),
        paper_id=trainer._paper.get("id"),
    )
    if is_adapter:
        card.data.library_name = "peft"
    card.data.pipeline_tag = "text-generation"
    rapo = (
        "## RAPO recipe\n\n"
        "Trained with `rapo_trl`'s `RAPOTrainer`: GRPO-style groups in which some rollouts (hybrid) get a step "
        "trace retrieved from a store of off-policy trajectories spliced in after a tool step. Tool results and "
        "retrieved steps are forced tokens without loss; the advantage is reweighted by the retrieval reward "
        "and the importance ratio of hybrid rollouts is shaped by their retrieved share.\n\n"
        f"{recipe_table(trainer)}\n\n{_evaluation_section(evaluation)}\n"
    )
    marker = "### Framework versions"
    text = _quick_start(str(card), hub_model_id or model_name, trainer)
    if base_model is None:  # TRL's template would link "[None](https://huggingface.co/None)"
        local = Path(str(get_config_model_id(trainer.model.config) or "")).name or "unknown"
        text = text.replace("[None](https://huggingface.co/None)", f"a local model (`{local}`, no Hub id)", 1)
    text = text.replace(marker, rapo + marker, 1) if marker in text else text + "\n" + rapo
    from huggingface_hub import ModelCard

    return ModelCard(text)


def tracker_urls() -> dict:
    """The run's tracker links, as TRL's own trainers put them in their cards: the Weights & Biases run, the
    Trackio Space and the Comet experiment, each ``None`` when there is none."""
    import sys

    from trl.trainer.utils import get_comet_experiment_url, get_trackio_space_url

    run = getattr(sys.modules.get("wandb"), "run", None)  # a started run only; wandb is never imported here
    return {"wandb_url": getattr(run, "url", None), "trackio_url": get_trackio_space_url(),
            "comet_url": get_comet_experiment_url()}


# Each tool the policy was trained with, as the quick start makes it again.
_TOOL_CODE = {"python": "PythonTool()", "search": "SearchTool(passages)"}
_TOOL_CLASSES = {"python": "PythonTool", "search": "SearchTool"}
_PASSAGES = ('from datasets import load_dataset\n\n'
             'passages = load_dataset("json", data_files="passages.jsonl", split="train")  # the corpus it searched\n')
_QUICK_START = """## Quick start

The model calls its tools in tags and reads their results back: run it as the agent it was trained as
(with `rapo_trl` installed){search}.

```python
{imports}
tools = [{tools}]
agent = RolloutAgent.from_pretrained("{model_id}", tools=tools, do_sample=False, max_completion_length=512)
question = "What is 4821 * 7315?"
prompt = [{{"role": "system", "content": {system_prompt}}}, {{"role": "user", "content": question}}]
print(agent.complete([prompt])[0])  # the tool calls ran; their results are between <result> tags
```

"""


def _own_tool(tool) -> tuple[str, str] | None:
    """``(import line, expression)`` that make a tool of the user's again (a typed function, or a Tool class made
    with no arguments), or None when it has no importable home (defined in ``__main__``)."""
    function = getattr(tool, "function", None)  # a FunctionTool wraps the user's function
    source, call = (function, "") if callable(function) else (type(tool), "()")
    found = _importable(source)
    return (found[0], found[1] + call) if found else None


def _importable(source) -> tuple[str, str] | None:
    """``(import line, name)`` of a module-level function or class, or None (defined in ``__main__`` or nested)."""
    module, name = getattr(source, "__module__", None), getattr(source, "__qualname__", "")
    if not module or module == "__main__" or "." in name or "<" in name:
        return None
    return f"from {module} import {name}", name


def _quick_start(text: str, model_id: str, trainer) -> str:
    """TRL's quick start is a plain pipeline that never runs a tool; RAPO's runs the agent with its tools, each
    name in it imported or defined: tools called in tags, or JSON tool calls (the chat template's) on the
    environment the policy was trained on."""
    snippet = (_json_quick_start(model_id, trainer) if getattr(trainer, "tool_protocol", "tags") == "json"
               else _tags_quick_start(model_id, trainer))
    return re.sub(r"## Quick start\n.*?```python\n.*?```\n\n", lambda _: snippet, text, count=1, flags=re.S)


def _tags_quick_start(model_id: str, trainer) -> str:
    from rapo_trl.tasks.prompt import system_prompt_for

    tools = list(getattr(trainer, "rapo_tools", []))
    tags = [getattr(tool, "tag", type(tool).__name__) for tool in tools]
    classes = sorted(_TOOL_CLASSES[t] for t in tags if t in _TOOL_CLASSES)
    trained_prompt = _trained_system_prompt(trainer)
    if trained_prompt == system_prompt_for(tools):
        trained_prompt = None  # the snippet makes it again from the tools
    names = ["RolloutAgent", *(["system_prompt_for"] if trained_prompt is None else []), *classes]
    lines = [f"from rapo_trl import {', '.join(names)}"]
    code, others = [], []
    for tool, tag in zip(tools, tags):
        own = None if tag in _TOOL_CODE else _own_tool(tool)
        if own is not None:
            lines.append(own[0])
        else:
            others += [] if tag in _TOOL_CODE else [tag]
        code.append(_TOOL_CODE.get(tag) or (own[1] if own else f"{tag}_tool"))
    imports = "\n".join(lines) + "\n" + ("\n" + _PASSAGES if "search" in tags else "")
    if trained_prompt is not None:  # a prompt of the user's own: the model answers best to the one it trained with
        imports += f"\nsystem_prompt = {_string_literal(trained_prompt)}  # the system prompt it was trained with\n"
    notes = (["`passages.jsonl` is the corpus it searched in training"] if "search" in tags else []) + (
        [f"{', '.join(f'`{tag}_tool`' for tag in others)} stand for the tools of your own it was trained with"]
        if others else [])
    prompt_code = "system_prompt_for(tools)" if trained_prompt is None else "system_prompt"
    return _QUICK_START.format(imports=imports, tools=", ".join(code), model_id=model_id, system_prompt=prompt_code,
                               search="; " + "; ".join(notes) if notes else "")


def _trained_system_prompt(trainer) -> str | None:
    """The system message of the first training row's conversational prompt, or None (plain-text prompts, none)."""
    dataset = getattr(trainer, "train_dataset", None)
    try:
        prompt = dataset[0]["prompt"]
    except (TypeError, KeyError, IndexError):  # no dataset, an iterable one, no prompt column
        return None
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], dict) and prompt[0].get("role") == "system":
        return prompt[0].get("content") if isinstance(prompt[0].get("content"), str) else None
    return None


def _string_literal(text: str) -> str:
    """``text`` as Python source: a triple-quoted string where that reads back the same, else its repr."""
    if '"""' in text or "\\" in text or text.endswith('"'):
        return repr(text)
    return f'"""{text}"""'


_JSON_QUICK_START = """## Quick start

The model calls its tools as JSON tool calls, as its chat template writes them, and reads their results back: run
it as the agent it was trained as (with `rapo_trl` installed){notes}.

```python
{imports}

agent = EnvironmentAgent.from_pretrained("{model_id}", {factory}, tools=[{tools}], max_completion_length=512)
rows = [{{"prompt": [{{"role": "user", "content": "What is 4821 * 7315?"}}]}}]
print(agent.episodes(rows)[0].row.messages)  # the tool calls ran; their results are the tool messages
```

"""


def _json_quick_start(model_id: str, trainer) -> str:
    """The quick start of a policy trained on JSON tool calls: ``EnvironmentAgent`` on the run's environment (if
    any) with its standalone tools, each imported from its module."""
    lines, stand_ins = ["from rapo_trl.rollout import EnvironmentAgent"], []
    factories = getattr(trainer, "environment_factories", None) or {}
    factory = "None"
    if factories:
        found = _importable(factories.get(None)) if list(factories) == [None] else None
        factory = found[1] if found else "environment_factory"
        lines += [found[0]] if found else []
        stand_ins += [] if found else ["`environment_factory`"]
    names = []
    for tool in getattr(trainer, "_standalone_tools", None) or []:
        found = _importable(tool)
        lines += [found[0]] if found else []
        names.append(found[1] if found else f"{getattr(tool, '__name__', 'tool')}_tool")
        stand_ins += [] if found else [f"`{names[-1]}`"]
    notes = f"; {', '.join(stand_ins)} stand for what of your own it was trained with" if stand_ins else ""
    return _JSON_QUICK_START.format(imports="\n".join(lines), model_id=model_id, factory=factory,
                                    tools=", ".join(names), notes=notes)


_QUICK_START_MODEL = re.compile(r'(\b(?:RolloutAgent|EnvironmentAgent)\.from_pretrained\()"[^"]*"')
"""The model id the quick start loads (``_QUICK_START``, ``_JSON_QUICK_START``)."""
_LORA_ROW = re.compile(r"^\| LoRA \| .* \| PEFT adapter \|$", re.M)
"""The recipe table's LoRA row (``recipe_table``): the adapter the trainer trained."""


def card_loading_repo(text: str, repo: str) -> str:
    """The card with its quick start loading ``repo``: written at training time, it names the run (or the
    hub_model_id it had then), which a push to another repo or under the user's namespace would leave naming a repo
    that does not hold this model."""
    return _QUICK_START_MODEL.sub(lambda found: f'{found.group(1)}"{repo}"', text)


_FINE_TUNED_FROM = re.compile(r"(fine-tuned version of )(?:\[[^\]]*\]\(https://huggingface\.co/[^)]*\)"
                              r"|a local model \(`[^`]*`, no Hub id\))")
"""The card's sentence naming the base (TRL's template, or ``build_model_card``'s words for a local base)."""


def card_naming_base(text: str, base: str) -> str:
    """The card naming ``base`` as the model it fine-tunes, in its metadata (the Hub links the base from there) and
    its opening sentence: a push may give the adapter another base than the one the card was written with. A base
    with no Hub id (a local folder) is left out of the metadata, which takes Hub ids only."""
    from huggingface_hub import ModelCard

    hub_id = base if _HUB_ID.match(base) and not Path(base).exists() else None
    card = ModelCard(text, ignore_metadata_errors=True)
    card.data.base_model = hub_id
    named = f"[{hub_id}](https://huggingface.co/{hub_id})" if hub_id else f"a local model (`{Path(base).name}`, no Hub id)"
    return _FINE_TUNED_FROM.sub(lambda found: found.group(1) + named, str(card), count=1)


def card_with_folded_adapter(text: str, config: dict, rapo_rank: int) -> str:
    """The card with its LoRA row describing the pushed adapter (``config``): the SFT warm start's LoRA folded with
    RAPO's (rank ``rapo_rank``), of their summed rank, where the card written at training time describes RAPO's."""
    rank = int(config["r"])
    row = (f"| LoRA | r={rank}, alpha={config['lora_alpha']}, targets={config['target_modules']} | one PEFT adapter: "
           f"the SFT warm start's LoRA (r={rank - rapo_rank}) folded with RAPO's (r={rapo_rank}) |")
    return _LORA_ROW.sub(lambda _: row, text, count=1)


_EVAL_SECTION = re.compile(r"## Evaluation\n\n" + re.escape(EVAL_START) + r".*?" + re.escape(EVAL_END) + r"\n",
                           re.DOTALL)
"""The card's evaluation section (``_evaluation_section``)."""


def evaluation_section_of(text: str) -> str | None:
    """The evaluation section of a card's text, or None where it has none."""
    found = _EVAL_SECTION.search(text)
    return found.group(0) if found else None


def card_with_evaluation_section(text: str, section: str) -> str:
    """The card's text with ``section`` in place of its evaluation section, or appended where it has none."""
    if _EVAL_SECTION.search(text):
        return _EVAL_SECTION.sub(lambda _: section, text, count=1)
    return text.rstrip("\n") + "\n\n" + section


def add_evaluation(folder, evaluation: dict) -> Path:
    """Put (or replace) the evaluation table in ``folder/README.md``; a card without one gets it appended."""
    path = Path(folder) / "README.md"
    text = path.read_text() if path.is_file() else ""
    path.write_text(card_with_evaluation_section(text, _evaluation_section(evaluation)))
    return path
