"""Prompts, dataset adapters and the shipped demo tasks with their scripted experts."""

from rapo_trl.protocol import RESULT_TEMPLATE
from rapo_trl.tasks.adapters import (
    gsm8k_final_answer,
    load_gsm8k,
    load_jsonl_qa,
    question_id_of,
    to_rapo_rows,
)
from rapo_trl.tasks.prompt import (
    NO_TOOLS_SYSTEM_PROMPT,
    PYTHON_SYSTEM_PROMPT,
    SEARCH_SYSTEM_PROMPT,
    SYSTEM_PROMPT,
    TOOLS_SYSTEM_PROMPT,
    system_prompt_for,
)
from rapo_trl.tasks.registry import TASKS, Task, get_task, load_corpus, load_task

__all__ = [
    "NO_TOOLS_SYSTEM_PROMPT",
    "PYTHON_SYSTEM_PROMPT",
    "RESULT_TEMPLATE",
    "SEARCH_SYSTEM_PROMPT",
    "SYSTEM_PROMPT",
    "TASKS",
    "TOOLS_SYSTEM_PROMPT",
    "Task",
    "get_task",
    "gsm8k_final_answer",
    "load_corpus",
    "load_gsm8k",
    "load_jsonl_qa",
    "load_task",
    "question_id_of",
    "system_prompt_for",
    "to_rapo_rows",
]
