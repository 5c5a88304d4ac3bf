"""Lexical and hybrid retrieval: BM25 (``bm25s``, Lucene's scoring) and reciprocal rank fusion of
BM25 with a dense encoder's ranking.

Why a lexical peer at all: on the retrieval benchmark (``finetune_embeddings``) plain keyword
search finds a document from one of its own sentences far better than any of our dense models,
and a fused ranking keeps most of both. The same functions score the benchmark and serve
``minisci search`` (shared, like :mod:`minisci.encoding`), so the served retriever is the measured one.

Reciprocal rank fusion (Cormack et al., 2009): a document's fused score is the sum over retrievers
of 1 / (``RRF_K`` + its rank). It needs no score calibration between cosine and BM25.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

RETRIEVERS = ("dense", "bm25", "hybrid")
RRF_K = 60  # the constant of Cormack et al.; damps the weight of the very top ranks
_TOKEN_RE = re.compile(r"[^\W_]+")
# bm25s' English stop words (33, Lucene's list): frequent words that only add noise to BM25 scores
_STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there "
    "these they this to was will with".split()
)


def tokenize(text: str) -> list[str]:
    """Lower-cased letter/digit runs without stop words (no stemming: one fewer dependency)."""
    return [w for w in _TOKEN_RE.findall(text.casefold()) if w not in _STOPWORDS]


class Bm25:
    """BM25 scores of every document for a query (``bm25s`` with Lucene's idf and k1 = 1.5, b = 0.75)."""

    def __init__(self, retriever):
        self.retriever = retriever

    @classmethod
    def build(cls, texts: list[str]) -> Bm25:
        import bm25s

        retriever = bm25s.BM25(method="lucene")
        # an empty token list would make bm25s index nothing for that document; "" keeps its row
        retriever.index([tokenize(t) or [""] for t in texts], show_progress=False)
        return cls(retriever)

    def scores(self, query: str) -> np.ndarray:
        """One score per document; all 0 for a query with no indexable word."""
        tokens = tokenize(query)
        if not tokens:
            return np.zeros(self.retriever.scores["num_docs"], dtype=np.float32)
        return np.asarray(self.retriever.get_scores(tokens), dtype=np.float32)

    def save(self, path: str | Path) -> None:
        self.retriever.save(str(path))  # JSON and .npy files, no pickle

    @classmethod
    def load(cls, path: str | Path) -> Bm25:
        import bm25s

        return cls(bm25s.BM25.load(str(path), allow_pickle=False))


def ranks(scores: np.ndarray) -> np.ndarray:
    """1-based rank of every document by descending score, ties in document order (per row)."""
    order = np.argsort(-scores, axis=-1, kind="stable")
    out = np.empty_like(order)
    np.put_along_axis(out, order, np.arange(1, scores.shape[-1] + 1)[None, :].repeat(len(scores), 0), axis=-1)
    return out


def fuse(dense: np.ndarray, lexical: np.ndarray) -> np.ndarray:
    """Reciprocal rank fusion of dense and BM25 scores ([queries, documents] each). A document that
    shares no word with the query (BM25 score 0) is not in BM25's list and gets nothing from it:
    ranked among the ties, it would be promoted by its place in the collection."""
    lexical = np.atleast_2d(lexical)
    return 1.0 / (RRF_K + ranks(np.atleast_2d(dense))) + np.where(lexical > 0, 1.0 / (RRF_K + ranks(lexical)), 0.0)


def hybrid_scores(dense: np.ndarray, lexical: np.ndarray) -> np.ndarray:
    """Fused scores of one query's dense and BM25 scores (1-d, one per document)."""
    return fuse(dense[None, :], lexical[None, :])[0]
