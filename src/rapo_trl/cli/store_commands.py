"""``rapo store stats|query PATH``: look inside a trace store."""

from __future__ import annotations

import argparse
import json

from rapo_trl.cli.parsing import option_names


def add_parser(subparsers) -> None:
    store = subparsers.add_parser("store", help="Look inside a trace store.")
    actions = store.add_subparsers(dest="store_command", metavar="ACTION", required=True)
    stats = actions.add_parser("stats", help="Records, questions, reward histogram, embedder, size.")
    query = actions.add_parser("query", help="The step a context would retrieve.")
    for sub in (stats, query):
        sub.add_argument("path", help="Store folder (embedded Chroma).")
        sub.add_argument("--collection", default="traces", help="Collection inside the store.")
    query.add_argument("text", help="Context to retrieve for (question plus the trajectory so far).")
    query.add_argument(*option_names("top_k"), type=positive_int, default=None,
                       help="Neighbours considered; the best stored reward among them wins (default: the store's).")


def positive_int(text: str) -> int:
    """An argparse type: an int of at least 1 (a neighbour count), refused while the command line is parsed."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def recorded_embedder(name: str, dimension: int):
    """An embedder the store records by ``name`` and ``dimension``: the hashing embedder made again, or a stand-in
    that answers ``stats`` and refuses to embed a query (a model of the user's own cannot be made from its name)."""
    from rapo_trl.embeddings import HashingEmbedder

    hashing = [HashingEmbedder(dimension, bigrams=bigrams) for bigrams in (True, False)]
    return next((embedder for embedder in hashing if embedder.name == name), RecordedEmbedder(name, dimension))


class RecordedEmbedder:
    """The name and dimension a store records, for reading its records; embedding is refused, naming the embedder."""

    def __init__(self, name: str, dimension: int):
        self.name, self.dimension = name, dimension

    def embed(self, texts):
        from rapo_trl.cli.errors import UsageError

        raise UsageError(f"the store was built with embedder {self.name!r} (dimension {self.dimension}), which "
                         "`rapo store query` cannot make from its name: query it in Python, "
                         "TraceStore(path, embedder=<that embedder>).select([context])")


def run(args: argparse.Namespace) -> dict:
    from pathlib import Path

    from rapo_trl.cli.errors import UsageError
    from rapo_trl.store import TraceStore
    from rapo_trl.store.errors import EmbedderMismatchError

    if Path(args.path).is_file():
        raise UsageError(f"store path '{args.path}' is a file, not a store folder")
    if not Path(args.path).is_dir():
        raise UsageError(f"store path '{args.path}' does not exist")
    # must_exist: a misspelled --collection is refused by name; it is never created, empty, in the store it looks into
    try:
        store = TraceStore(args.path, collection=args.collection, must_exist=True)
    except EmbedderMismatchError as error:
        if error.stored is None:
            raise
        # Built in Python with another embedder: its records read without one; a query needs that embedder.
        store = TraceStore(args.path, collection=args.collection, embedder=recorded_embedder(*error.stored),
                           must_exist=True)
    if args.store_command == "stats":
        stats = store.stats()
        print(json.dumps(stats, indent=2, default=str))
        return stats
    if args.top_k is not None:
        store.config.top_k = args.top_k
    (found,) = store.select([args.text])
    result = {
        "fallback": found.is_fallback, "reward": found.reward, "similarity": found.similarity,
        "record_id": found.record_id, "question_id": found.question_id, "text": found.text,
    }
    print(json.dumps(result, indent=2))
    return result
