"""SearchTool over small corpora: ranking, formatting, errors and index reuse."""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest

from rapo_trl.embeddings import CallableEmbedder
from rapo_trl.tools import SearchTool, ToolError

CORPUS = [
    "The Eiffel Tower is a wrought-iron lattice tower in Paris, France, completed in 1889.",
    "Photosynthesis converts light energy into chemical energy stored in glucose in plants.",
    "The Great Wall of China stretches thousands of kilometres across northern China.",
    "Python is a programming language created by Guido van Rossum and released in 1991.",
    "The Amazon river in South America carries more water than any other river.",
]
TITLES = ["Eiffel Tower", "Photosynthesis", "Great Wall", "Python (language)", "Amazon River"]


class CountingBagOfWords:
    """Hashed bag-of-words vectors: deterministic, instant, and counts how many texts it embedded."""

    def __init__(self, dimension: int = 256):
        self.calls = 0
        self.inner = CallableEmbedder(self._vectors, name="bag-of-words", dimension=dimension)
        self.name, self.dimension = self.inner.name, dimension

    def _vectors(self, texts):
        vectors = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"[a-z]+", text.lower()):
                vectors[row, int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dimension] += 1.0
        return vectors + 1e-3

    def embed(self, texts):
        self.calls += len(texts)
        return self.inner.embed(texts)


def test_right_passage_ranks_first_with_minilm():
    tool = SearchTool(CORPUS, top_k=2)  # the real all-MiniLM-L6-v2, loaded offline
    hits = tool.search("Which plants turn sunlight into sugar?")
    assert hits[0]["text"] == CORPUS[1] and len(hits) == 2
    assert tool.search("tall iron structure in the French capital")[0]["text"] == CORPUS[0]


def test_format_numbered_docs_with_titles():
    from datasets import Dataset

    corpus = Dataset.from_dict({"text": CORPUS, "title": TITLES})
    output = SearchTool(corpus, top_k=3, embedder=CountingBagOfWords()).run(
        "  who created the python language  "
    )
    lines = output.split("\n")
    assert len(lines) == 3
    assert lines[0] == f"Doc 1 (Python (language)): {CORPUS[3]}"
    assert lines[1].startswith("Doc 2 (") and lines[2].startswith("Doc 3 (")


def test_untitled_passages_and_top_k_larger_than_corpus():
    output = SearchTool(CORPUS[:2], top_k=5, embedder=CountingBagOfWords()).run("Eiffel Tower Paris")
    assert output.split("\n") == [f"Doc 1: {CORPUS[0]}", f"Doc 2: {CORPUS[1]}"]


def test_empty_query_is_a_tool_error():
    tool = SearchTool(CORPUS, embedder=CountingBagOfWords())
    with pytest.raises(ToolError, match="Empty search query"):
        tool.run(" \n ")


def test_bad_corpora_are_refused():
    embedder = CountingBagOfWords()
    with pytest.raises(ValueError, match="empty"):
        SearchTool([], embedder=embedder)
    with pytest.raises(TypeError):
        SearchTool("just one string", embedder=embedder)


def test_persistent_index_is_reused_and_rebuilt_on_change(tmp_path):
    first = CountingBagOfWords()
    SearchTool(CORPUS, embedder=first, path=tmp_path, collection="docs")
    assert first.calls == len(CORPUS)

    again = CountingBagOfWords()
    tool = SearchTool(CORPUS, embedder=again, path=tmp_path, collection="docs")
    assert again.calls == 0  # same corpus and embedder: nothing re-embedded
    assert tool.search("Amazon river water")[0]["text"] == CORPUS[4]

    changed = CountingBagOfWords()
    tool = SearchTool(
        CORPUS + ["Mount Everest is the highest mountain."],
        embedder=changed,
        path=tmp_path,
        collection="docs",
    )
    assert changed.calls == len(CORPUS) + 1
    assert tool.search("highest mountain")[0]["text"].startswith("Mount Everest")


def test_in_memory_indexes_do_not_collide():
    a = SearchTool(CORPUS[:2], embedder=CountingBagOfWords())
    b = SearchTool(CORPUS[2:], embedder=CountingBagOfWords())
    assert a.search("Paris")[0]["text"] == CORPUS[0]
    assert b.search("Paris")[0]["text"] in CORPUS[2:]



def test_a_passage_repeated_in_the_corpus_fills_one_place_of_the_top_k():
    from datasets import Dataset

    # The copies differ only in spacing, which the result text does not show.
    tool = SearchTool(CORPUS + [CORPUS[0], CORPUS[0].replace(" ", "  ") + "\n"], top_k=3,
                      embedder=CountingBagOfWords())
    texts = [hit["text"] for hit in tool.search("Eiffel Tower Paris")]
    assert texts[0] == CORPUS[0] and len(texts) == 3 and len(set(texts)) == 3
    # The same words under another title are another document.
    titled = Dataset.from_dict({"text": [CORPUS[0], CORPUS[0]], "title": ["Paris", "Towers"]})
    assert len(SearchTool(titled, top_k=2, embedder=CountingBagOfWords()).search("Eiffel")) == 2


def test_a_corpus_of_records_is_read_by_text_and_title_and_other_items_are_refused():
    import pandas as pd

    # Dataset.to_list() and the two_hop world's passages() give records; their text, not the dict's repr, is searched.
    records = [{"title": title, "text": text} for title, text in zip(TITLES, CORPUS)]
    output = SearchTool(records, top_k=1, embedder=CountingBagOfWords()).run("who created the python language")
    assert output == f"Doc 1 (Python (language)): {CORPUS[3]}"
    for corpus in ([CORPUS[0], None], [{"title": "No text"}], pd.DataFrame({"text": CORPUS})):
        with pytest.raises(TypeError, match="passage"):
            SearchTool(corpus, embedder=CountingBagOfWords())


def test_each_passage_is_one_line_whatever_its_title_holds():
    from datasets import Dataset

    corpus = Dataset.from_dict({"text": CORPUS[:2], "title": ["Eiffel\nTower ", "Photo\tsynthesis"]})
    output = SearchTool(corpus, top_k=2, embedder=CountingBagOfWords()).run("Eiffel Tower Paris")
    assert output.split("\n") == [f"Doc 1 (Eiffel Tower): {CORPUS[0]}", f"Doc 2 (Photo synthesis): {CORPUS[1]}"]
