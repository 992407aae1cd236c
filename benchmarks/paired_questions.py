"""Arms paired question by question: each fresh question's sampled pass rate against the reference's on the same
question and seed, and an interval that resamples questions whole (a question's seeds are not independent draws)."""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable

FRESH = "reward_only_fresh"
BOOTSTRAP_RESAMPLES = 2000


def per_question_difference(members: list[dict], references: list[dict],
                            keep: Callable[[int], set[str]] | None = None) -> dict[str, list[float]]:
    """Question id -> the arm's sampled pass rate minus the reference's on that question, one value per seed both ran
    (fresh questions; the questions both scored; with ``keep``, only the questions ``keep(seed)`` names)."""
    by_seed = {r["seed"]: r["eval"][FRESH] for r in references}
    differences: dict[str, list[float]] = {}
    for member in members:
        scores, reference = member["eval"][FRESH], by_seed.get(member["seed"])
        if reference is None or not {"sampled_correct_by_question", "question_ids"} <= scores.keys() & reference.keys():
            continue
        theirs = dict(zip(reference["question_ids"], reference["sampled_correct_by_question"], strict=True))
        kept = None if keep is None else keep(member["seed"])
        for question, passes in zip(scores["question_ids"], scores["sampled_correct_by_question"], strict=True):
            if question in theirs and (kept is None or question in kept):
                differences.setdefault(question, []).append(passes / scores["k"] - theirs[question] / reference["k"])
    return differences


def cluster_bootstrap(differences: dict[str, list[float]], resamples: int = BOOTSTRAP_RESAMPLES,
                      seed: int = 0) -> tuple[float, float, float]:
    """(mean, 2.5th, 97.5th percentile) of the mean paired difference, resampling questions with all their seeds'
    values together."""
    clusters = list(differences.values())
    rng = random.Random(seed)
    means = sorted(_mean_of_clusters(rng.choices(clusters, k=len(clusters))) for _ in range(resamples))
    return _mean_of_clusters(clusters), means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]


def _mean_of_clusters(clusters: list[list[float]]) -> float:
    return statistics.fmean(value for cluster in clusters for value in cluster)


def paired_text(differences: dict[str, list[float]]) -> str:
    """The mean per-question difference and its interval as a table cell; ``-`` for no pair."""
    return interval_text(cluster_bootstrap(differences), len(differences)) if differences else "-"


def interval_text(interval: tuple[float, float, float], questions: int) -> str:
    """A ``cluster_bootstrap`` result as a table cell."""
    mean, low, high = interval
    return f"{mean:+.3f} ({low:+.3f} to {high:+.3f}, {questions} questions)"
