"""A trace store as a whole: filled from a dataset or an off-policy agent, exported as a dataset, a folder, a Hub
dataset repo or SFT examples, read in pages and summarised. The work is in ``dataset_io.py``, ``agent.py`` and
``sft_examples.py``; these methods are the store's way in (``TraceStore.from_dataset`` and ``from_hub``, which make a
store, are with its other constructors)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence


class ImportExport:
    """TraceStore's whole-store methods; need ``collection`` and ``config`` on the store."""

    def add_from_dataset(
        self,
        ds,
        text_column: str = "trajectory",
        reward_column: str = "reward",
        question_column: str = "question_id",
        **kwargs,
    ) -> int:
        """Store a ``datasets.Dataset`` of tagged trajectories; see :func:`~rapo_trl.store.dataset_io.add_from_dataset`."""
        from rapo_trl.store.dataset_io import add_from_dataset

        return add_from_dataset(self, ds, text_column, reward_column, question_column, **kwargs)

    def build_from_agent(
        self, agent, questions, reward_fn, num_samples: int = 16, keep_top_k: int = 5, **kwargs
    ) -> int:
        """Have an off-policy agent solve every question; see :func:`~rapo_trl.store.agent.build_from_agent`."""
        from rapo_trl.store.agent import build_from_agent

        return build_from_agent(self, agent, questions, reward_fn, num_samples, keep_top_k, **kwargs)

    def to_dataset(self, include_embeddings: bool = True):
        """All records as a ``datasets.Dataset`` (one row per step; ``embedding`` column optional)."""
        from rapo_trl.store.dataset_io import to_dataset

        return to_dataset(self, include_embeddings)

    def sft_dataset(self, rows, min_reward: float = 1.0):
        """A ``datasets.Dataset`` of conversational SFT examples, ready for ``trl.SFTTrainer(train_dataset=...)``: for
        each of ``rows`` (RL rows as ``to_rapo_rows`` makes them, a dataset or a list of dicts) whose question has a
        stored trajectory with reward >= ``min_reward``, its ``prompt`` and, as ``completion``, the best such
        trajectory's steps as one assistant message; what ``rapo train``'s SFT stages imitate. Raises ValueError
        when no row's question has one."""
        from datasets import Dataset

        from rapo_trl.store.sft_examples import sft_examples

        return Dataset.from_list(sft_examples(rows, self, min_reward))

    def push_to_hub(self, repo_id: str, private: bool | None = None, token=None, include_embeddings: bool = True,
                    commit_message: str = "Upload RAPO trace store") -> str:
        """Upload every record as a Hub dataset (parquet + a dataset card with records, embedder, source
        agents and reward histogram); returns its URL. ``TraceStore.from_hub`` reads it back."""
        from rapo_trl.store.dataset_io import push_to_hub

        return push_to_hub(self, repo_id, private, token, include_embeddings, commit_message)

    def export_to_folder(self, folder, include_embeddings: bool = True):
        """Write what ``push_to_hub`` uploads (``data/*.parquet`` + ``README.md``) into a local folder."""
        from rapo_trl.store.dataset_io import export_to_folder

        return export_to_folder(self, folder, include_embeddings)

    def iter_batches(self, include: Sequence[str] = ("metadatas",)) -> Iterator[dict]:
        """Every record in pages of ``config.read_batch_size`` (Chroma ``get`` results)."""
        offset = 0
        while True:
            page = self.collection.get(
                include=list(include), limit=self.config.read_batch_size, offset=offset
            )
            if not page["ids"]:
                return
            yield page
            offset += len(page["ids"])

    def stats(self, bins: int = 10) -> dict:
        """Records, questions, trajectories, sources, a reward histogram, the embedder, the index settings and (an
        embedded store) the size of its folder with the collections sharing it; see
        :func:`~rapo_trl.store.dataset_io.store_stats`."""
        from rapo_trl.store.dataset_io import store_stats

        return store_stats(self, bins)
