"""RAPO's algorithm without TRL: the objective's maths (``objective``), the outcome advantage's baselines
(``advantage_baselines``) and one step for one group that strings them together (``reference``). Imports torch only; ``RAPOTrainer`` is the TRL adapter that calls it.
``rows`` holds the rollout's row as plain data, here because the rollout engine, the store and the trainer all read
it."""

from rapo_trl.core.advantage_baselines import ADVANTAGE_BASELINES, outcome_advantages
from rapo_trl.core.objective import (
    dual_clipped_token_loss,
    group_normalize,
    retrieval_reward,
    retrieved_fraction,
    retrieved_token_loss,
    retrieved_token_weights,
    reweight_advantages,
    shaped_old_logps,
    shaped_ratio,
    token_mean,
    trajectory_retrieval_reward,
)
from rapo_trl.core.reference import Coefficients, StepResult, reference_step

__all__ = [
    "ADVANTAGE_BASELINES",
    "Coefficients",
    "StepResult",
    "dual_clipped_token_loss",
    "group_normalize",
    "outcome_advantages",
    "reference_step",
    "retrieval_reward",
    "retrieved_fraction",
    "retrieved_token_loss",
    "retrieved_token_weights",
    "reweight_advantages",
    "shaped_old_logps",
    "shaped_ratio",
    "token_mean",
    "trajectory_retrieval_reward",
]
