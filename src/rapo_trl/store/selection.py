"""RAPO's selection rule (``pick``), for one query:

- the candidates are the ``top_k`` stored keys nearest to the query, and every key as near as the k-th
  (``neighbours.py``);
- the one with the highest stored reward is retrieved (ties: the most similar, then the nearer rank);
- the fallback text is inserted instead when that reward is not above ``min_reward``, or there is no candidate.

``TraceStore.select_embedded`` in ``retrieval.py`` applies it to every query of a batch, with what it needs (the
neighbours, the rewards) gathered before and each winner confirmed against Chroma after. Beside the rule, what the
store's reads and writes return (``Retrieved``, ``Selection``, ``Written``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Retrieved:
    """What a retrieval inserts into a hybrid rollout, with its provenance (``None`` on fallback)."""

    text: str
    reward: float | None
    similarity: float | None
    record_id: str | None
    question_id: str | None
    step_index: int | None
    source: str | None
    is_fallback: bool


@dataclass
class Selection:
    """What :meth:`TraceStore.select_timed` returns: one retrieval per query, and where the time went."""

    retrieved: list[Retrieved]
    embed_s: float = 0.0
    """Seconds spent embedding the queries (0 when they came embedded)."""
    search_s: float = 0.0
    """Seconds spent finding the neighbours and applying the rule (Chroma or the local index, metadata reads)."""


@dataclass
class Written:
    """What :meth:`TraceStore.add_records_timed` returns: the records added, and where the time went."""

    added: int
    """Records written (ids already stored are skipped)."""
    check_s: float = 0.0
    """Seconds spent asking Chroma which ids it already holds."""
    embed_s: float = 0.0
    """Seconds spent embedding the new records' keys."""
    index_s: float = 0.0
    """Seconds spent in Chroma's ``add`` (writing and indexing)."""


def fallback(text: str) -> Retrieved:
    """The fallback retrieval: ``text`` tells the model to reason on its own."""
    return Retrieved(text, None, None, None, None, None, None, True)


def similarity_from_distance(distance: float, space: str) -> float:
    """Cosine similarity of normalised vectors from a Chroma distance in ``space``."""
    if space == "l2":  # Chroma's l2 is the squared distance: |a-b|^2 = 2 - 2 cos
        return 1.0 - distance / 2.0
    return 1.0 - distance  # cosine and ip distances are 1 - <a, b>


def best_candidate(rewards, distances, space: str) -> tuple[int, float, float] | None:
    """``(position, reward, similarity)`` of the candidate the rule keeps: the highest reward, ties
    broken by similarity, exact ties by rank (the nearer one); ``None`` when there is no candidate."""
    best = None
    for position, (reward, distance) in enumerate(zip(rewards, distances, strict=True)):
        candidate = (float(reward), similarity_from_distance(float(distance), space))
        if best is None or candidate > best[0]:
            best = (candidate, position)
    if best is None:
        return None
    (reward, similarity), position = best
    return position, reward, similarity


def retrieved(record_id: str, metadata: dict, reward: float, similarity: float) -> Retrieved:
    """The retrieval of stored record ``record_id`` with its Chroma ``metadata``."""
    return Retrieved(
        text=metadata["value"],
        reward=reward,
        similarity=similarity,
        record_id=record_id,
        question_id=metadata.get("question_id"),
        step_index=metadata.get("step_index"),
        source=metadata.get("source"),
        is_fallback=False,
    )


def pick(ids: list[str], rewards, distances, space: str, min_reward: float) -> tuple[str, float, float] | None:
    """RAPO's rule for one query's neighbours: ``(id, reward, similarity)`` of the highest stored reward (ties: the
    most similar, then the nearer rank), or ``None`` (the fallback text) when that reward is not above
    ``min_reward`` or there is no neighbour."""
    best = best_candidate(rewards, distances, space)
    if best is None or best[1] <= min_reward:
        return None
    position, reward, similarity = best
    return ids[position], reward, similarity


def choose(ids: list[str], distances: list[float], metadatas: list[dict], space: str, min_reward: float,
           fallback_text: str) -> Retrieved:
    """``pick`` over one query's neighbours with their Chroma metadata, as the retrieval it inserts (the store's own
    path reads rewards from its in-memory map instead; this one is the reference its tests compare with)."""
    if not len(ids) == len(distances) == len(metadatas):
        raise ValueError("choose() needs one distance and one metadata per id.")
    chosen = pick(ids, [metadata["reward"] for metadata in metadatas], distances, space, min_reward)
    if chosen is None:
        return fallback(fallback_text)
    record_id, reward, similarity = chosen
    return retrieved(record_id, metadatas[ids.index(record_id)], reward, similarity)
