"""Step-wise hybrid rollouts: token-in-token-out sequences, loss masks, step entropies, retrieval."""

from rapo_trl.core.retrieval_rule import is_hybrid_row
from rapo_trl.core.rows import RetrievalEvent, RolloutRow, Segment
from rapo_trl.rollout.backends import GenerationBackend, SamplingSettings, TransformersBackend
from rapo_trl.rollout.engine import (
    RETRIEVE_PREFACE,
    HybridRolloutEngine,
    Rollout,
    RolloutConfig,
    RolloutStats,
    extract_tool_call,
)
from rapo_trl.rollout.entropy import step_entropy, token_entropies
from rapo_trl.rollout.environment_agent import EnvironmentAgent, Episode
from rapo_trl.rollout.types import TurnOutput

__all__ = [
    "RETRIEVE_PREFACE",
    "EnvironmentAgent",
    "Episode",
    "GenerationBackend",
    "HybridRolloutEngine",
    "RetrievalEvent",
    "Rollout",
    "RolloutConfig",
    "RolloutRow",
    "RolloutStats",
    "SamplingSettings",
    "Segment",
    "TransformersBackend",
    "TurnOutput",
    "extract_tool_call",
    "is_hybrid_row",
    "step_entropy",
    "token_entropies",
]
