"""Generation backends: one call per turn over all active rows, stopping at tool tags."""

from rapo_trl.rollout.backends.base import GenerationBackend, SamplingSettings, find_stop
from rapo_trl.rollout.backends.transformers import TransformersBackend

__all__ = ["GenerationBackend", "SamplingSettings", "TransformersBackend", "find_stop"]
