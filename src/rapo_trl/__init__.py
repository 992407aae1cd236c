"""rapo_trl: Retrieval-Augmented Policy Optimization (RAPO) on Hugging Face TRL."""

__version__ = "0.1.0"

_LAZY = {
    "RAPOConfig": "rapo_trl.config",
    "RAPOTrainer": "rapo_trl.trainer",
    "TraceStore": "rapo_trl.store",
    "HybridRolloutEngine": "rapo_trl.rollout",
    "RolloutConfig": "rapo_trl.rollout",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name):
    # Lazy: `rapo --help` and `import rapo_trl` stay fast; torch/TRL load on first use.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rapo_trl' has no attribute {name!r}")
