"""rapo_trl: Retrieval-Augmented Policy Optimization (RAPO) on Hugging Face TRL."""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"

# The user-facing API (what the README and the notebook use), by the module that defines it. Loaded on
# first access (PEP 562 module __getattr__/__dir__), so `import rapo_trl` and `rapo --help` stay fast and
# torch/transformers/TRL load only when a name needs them. Hand-written: a lazy-loading library
# (lazy_loader) would be a new dependency for a dict and two short functions.
_LAZY = {
    # training
    "RAPOConfig": "rapo_trl.config",
    "RECOMMENDED_RETRIEVAL": "rapo_trl.config",
    "RAPOTrainer": "rapo_trl.trainer",
    # trace store
    "TraceStore": "rapo_trl.store",
    "StoreConfig": "rapo_trl.store",
    "SentenceTransformerEmbedder": "rapo_trl.embeddings",
    # tools
    "PythonTool": "rapo_trl.tools",
    "SearchTool": "rapo_trl.tools",
    "FunctionTool": "rapo_trl.tools",
    # rewards
    "rapo_outcome_reward": "rapo_trl.rewards",
    "make_rapo_outcome_reward": "rapo_trl.rewards",
    "numeric_closeness_reward": "rapo_trl.rewards",
    "make_numeric_closeness_reward": "rapo_trl.rewards",
    "math_equivalence_reward": "rapo_trl.rewards",
    "exact_match_reward": "rapo_trl.rewards",
    "f1_reward": "rapo_trl.rewards",
    # tasks and datasets
    "get_task": "rapo_trl.tasks",
    "load_task": "rapo_trl.tasks",
    "to_rapo_rows": "rapo_trl.tasks",
    "system_prompt_for": "rapo_trl.tasks",
    # rollouts, policies and evaluation
    "HybridRolloutEngine": "rapo_trl.rollout",
    "RolloutConfig": "rapo_trl.rollout",
    "RolloutAgent": "rapo_trl.rollout.agent",
    "load_policy": "rapo_trl.rollout.agent",
    "evaluate_policy": "rapo_trl.evaluation",
    "mean_at_k": "rapo_trl.evaluation",
    # hardware, plots, model card
    "default_device": "rapo_trl.hardware",
    "default_precision": "rapo_trl.hardware",
    "plot_run": "rapo_trl.plots",
    "plot_history": "rapo_trl.plots",
    "add_evaluation": "rapo_trl.model_card",
}

# A literal list, so that ruff, type checkers and `from rapo_trl import *` all read it; tests check it
# names exactly the keys of _LAZY and the imports below.
__all__ = [
    "__version__",
    "FunctionTool",
    "HybridRolloutEngine",
    "PythonTool",
    "RAPOConfig",
    "RAPOTrainer",
    "RECOMMENDED_RETRIEVAL",
    "RolloutAgent",
    "RolloutConfig",
    "SearchTool",
    "SentenceTransformerEmbedder",
    "StoreConfig",
    "TraceStore",
    "add_evaluation",
    "default_device",
    "default_precision",
    "evaluate_policy",
    "exact_match_reward",
    "f1_reward",
    "get_task",
    "load_policy",
    "load_task",
    "make_numeric_closeness_reward",
    "make_rapo_outcome_reward",
    "math_equivalence_reward",
    "mean_at_k",
    "numeric_closeness_reward",
    "plot_history",
    "plot_run",
    "rapo_outcome_reward",
    "system_prompt_for",
    "to_rapo_rows",
]

if TYPE_CHECKING:  # the same names for type checkers and IDEs (py.typed), which do not run __getattr__
    from rapo_trl.config import RECOMMENDED_RETRIEVAL, RAPOConfig
    from rapo_trl.embeddings import SentenceTransformerEmbedder
    from rapo_trl.evaluation import evaluate_policy, mean_at_k
    from rapo_trl.hardware import default_device, default_precision
    from rapo_trl.model_card import add_evaluation
    from rapo_trl.plots import plot_history, plot_run
    from rapo_trl.rewards import (
        exact_match_reward,
        f1_reward,
        make_numeric_closeness_reward,
        make_rapo_outcome_reward,
        math_equivalence_reward,
        numeric_closeness_reward,
        rapo_outcome_reward,
    )
    from rapo_trl.rollout import HybridRolloutEngine, RolloutConfig
    from rapo_trl.rollout.agent import RolloutAgent, load_policy
    from rapo_trl.store import StoreConfig, TraceStore
    from rapo_trl.tasks import get_task, load_task, system_prompt_for, to_rapo_rows
    from rapo_trl.tools import FunctionTool, PythonTool, SearchTool
    from rapo_trl.trainer import RAPOTrainer


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # later lookups skip __getattr__
        return value
    raise AttributeError(f"module 'rapo_trl' has no attribute {name!r}")


def __dir__() -> list[str]:
    # Without it, dir() and tab completion list only what is already loaded, not RAPOTrainer and the rest.
    return sorted(set(globals()) | set(__all__))
