"""Reward functions for RAPO, each callable the way TRL calls rewards:
``fn(prompts, completions, completion_ids, **dataset_columns) -> list[float]``."""

from rapo_trl.rewards.answer import (
    exact_match_reward,
    f1_reward,
    make_numeric_closeness_reward,
    math_equivalence_reward,
    math_equivalent,
    numeric_closeness,
    numeric_closeness_reward,
)
from rapo_trl.rewards.combine import CombinedReward, combine_rewards
from rapo_trl.rewards.format import format_check, mask_results, tools_used
from rapo_trl.rewards.outcome import RapoOutcomeReward, make_rapo_outcome_reward, rapo_outcome_reward
from rapo_trl.rewards.parsing import (
    RETRIEVE_PREFACE,
    completion_text,
    extract_prediction,
    last_boxed,
    strip_retrieved_blocks,
)
from rapo_trl.rewards.scoring import exact_match, gold_list, normalize_answer, token_f1

__all__ = [
    "RETRIEVE_PREFACE",
    "CombinedReward",
    "RapoOutcomeReward",
    "combine_rewards",
    "completion_text",
    "exact_match",
    "exact_match_reward",
    "extract_prediction",
    "f1_reward",
    "format_check",
    "gold_list",
    "last_boxed",
    "make_numeric_closeness_reward",
    "make_rapo_outcome_reward",
    "mask_results",
    "math_equivalence_reward",
    "math_equivalent",
    "normalize_answer",
    "numeric_closeness",
    "numeric_closeness_reward",
    "rapo_outcome_reward",
    "strip_retrieved_blocks",
    "token_f1",
    "tools_used",
]
