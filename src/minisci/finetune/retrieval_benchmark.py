"""The retrieval benchmark of ``finetune_embeddings``, built from the corpus without labels.

Guarded like every test split:

- the **pool** is every document of the ``corpora:`` catalogue (the shipped pool by default, or the
  user's own corpora), deduplicated as ``sample_corpus`` does;
- **query documents** are titled abstracts of the pool (a title of at least 4 words and a text of
  at least 30, not a full text) that the corpus sample (hence pretraining) never saw, drawn in a
  seeded order that depends on each id alone (as ``sample_corpus`` draws);
- the **candidates** are the query documents plus distractors from the rest of the pool (any kind,
  sampled or not) of the query documents' length at most (the longest query document's words): a
  full text many times an abstract's length is told apart by its length alone, and windowing it
  would take most of the stage's scoring time (the shipped pool's full texts are 4% of its documents
  and 57% of its words). Thousands, so that a model's ranking errors show (300 documents saturate
  recall@10 for every model);
- **embedding training** uses only titled abstracts that are candidates of neither split, so no
  query document and no distractor is ever a training pair. Documents the pool flags as
  overlapping an evaluation set (the catalogue's ``flag_field``) are used for nothing.

Two query kinds per query document: its title (``title``: title -> abstract) and one sentence from
the second half of its abstract (``sentence``: a passage -> the document it comes from). The query
sentence is removed from its document's candidate text (the inverse cloze task of Lee et al., 2019):
left in, it would be found word for word, and BM25 scored a trivial 1.0. A candidate is the abstract
text alone, less that sentence: the title is the ``title`` query.

A ``dev`` split (its own query documents and distractors) chooses the starting encoder and the
served model; the ``test`` split gives the report's numbers and verdicts, and is used for nothing
else.
"""

from __future__ import annotations

import dataclasses
import random
import re
from pathlib import Path

import numpy as np

from minisci.config import CorpusConfig
from minisci.data.corpora import iter_records
from minisci.data.corpus import duplicates, rank, text_key
from minisci.data.readers import Document, read_documents
from minisci.errors import MinisciError

QUERY_KINDS = ("title", "sentence")
MIN_TITLE_WORDS = 4  # shorter "titles" are headings ("Introduction"), not descriptions
MIN_TEXT_WORDS = 30  # an abstract, not a stub
MIN_SENTENCE_WORDS = 8  # a query sentence says something specific
_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(])")  # the abstracts' own punctuation; no model needed


@dataclasses.dataclass
class Split:
    """Candidates (``id``, ``text``) and, per query kind, (query text, index of its document)."""

    candidates: list[dict]
    queries: dict[str, list[tuple[str, int]]]


@dataclasses.dataclass
class Benchmark:
    dev: Split
    test: Split
    train: list[dict]  # titled abstracts for training pairs: {"id", "title", "text"}
    pretrain_ids: set[str]  # the corpus sample's documents (pretraining saw these)


def titled(d: Document) -> bool:
    return (
        not d.kind.startswith("fulltext")  # a paper's full text is not what its title describes alone
        and len(d.title.split()) >= MIN_TITLE_WORDS
        and len(d.text.split()) >= MIN_TEXT_WORDS
        and not d.eval_overlap
    )


def cloze(text: str, seed: int, doc_id: str) -> tuple[str | None, str]:
    """A seeded sentence of at least 8 words from the second half of ``text``, and the text without
    it (whitespace normalised); ``(None, text)`` if there is no such sentence."""
    sents = _SENTENCE_RE.split(" ".join(text.split()))
    # the second half; never a one-sentence text's only sentence (its document would be left empty)
    second = [j for j in range(max(1, len(sents) // 2), len(sents)) if len(sents[j].split()) >= MIN_SENTENCE_WORDS]
    if not second:
        return None, " ".join(sents)
    j = min(second, key=lambda j: rank(seed, f"{doc_id}:{sents[j]}", "sentence"))
    return sents[j], " ".join(sents[:j] + sents[j + 1 :])


def _split(query_docs: list[Document], distractors: list[Document], seed: int) -> Split:
    candidates, queries = [], {k: [] for k in QUERY_KINDS}
    for i, d in enumerate(query_docs):
        sentence, rest = cloze(d.text, seed, d.id)
        candidates.append({"id": d.id, "text": rest})
        queries["title"].append((" ".join(d.title.split()), i))
        if sentence is not None:
            queries["sentence"].append((sentence, i))
    candidates += [{"id": d.id, "text": " ".join(d.text.split())} for d in distractors]
    return Split(candidates, queries)


def load_deduplicated_pool(corpora: dict[str, CorpusConfig], root: str | Path = ".") -> list[Document]:
    """Every document of the corpus catalogue (paths relative to ``root``), in catalogue order,
    without duplicates, by sample_corpus's rule (the first per id and per text)."""
    pool = [
        Document(r.id, r.source, name, r.kind, r.title, r.text, r.flagged)
        for name, cfg in corpora.items()
        for _, _, r in iter_records(name, cfg, Path(root))
    ]
    ids = np.array([d.id for d in pool], dtype=object)
    dup = duplicates(ids, np.array([text_key(d.text) for d in pool], dtype=np.uint64))
    return [d for d, drop in zip(pool, dup) if not drop]


def build_benchmark(corpora: dict[str, CorpusConfig], documents, cfg, root: str | Path = ".") -> Benchmark:
    """Dev and test splits and the training documents (see the module docstring) from the catalogue's
    ``corpora`` and the corpus sample ``documents``. ``cfg``: ``n_test_queries``, ``n_dev_queries``
    (query documents), ``n_candidates``, ``n_dev_candidates`` (documents searched), ``seed``."""
    pool = [d for d in load_deduplicated_pool(corpora, root) if not d.eval_overlap]
    pretrain_ids = {d["id"] for d in read_documents(documents)}
    order = sorted(pool, key=lambda d: rank(cfg.seed, d.id, "retrieval"))
    # 1. query documents: titled abstracts that pretraining never saw
    held = [d for d in order if titled(d) and d.id not in pretrain_ids]
    need = cfg.n_test_queries + cfg.n_dev_queries
    if len(held) < need:
        raise MinisciError(
            f"finetune_embeddings: only {len(held)} titled abstracts outside the corpus sample; "
            f"n_test_queries + n_dev_queries = {need}: lower them"
        )
    test_q, dev_q = held[: cfg.n_test_queries], held[cfg.n_test_queries : need]
    # 2. distractors: the rest of the pool in the same seeded order, no longer than a query document
    taken = {d.id for d in held[:need]}
    longest = max(len(d.text.split()) for d in held[:need])
    rest = [d for d in order if d.id not in taken and len(d.text.split()) <= longest]
    n_test_d, n_dev_d = cfg.n_candidates - len(test_q), cfg.n_dev_candidates - len(dev_q)
    if len(rest) < n_test_d + n_dev_d:
        raise MinisciError(
            f"finetune_embeddings: n_candidates + n_dev_candidates = {cfg.n_candidates + cfg.n_dev_candidates} need "
            f"{n_test_d + n_dev_d} distractors; the pool has {len(rest)} outside the query documents with at most "
            f"{longest} words (the longest query document's): lower them"
        )
    test_d, dev_d = rest[:n_test_d], rest[n_test_d : n_test_d + n_dev_d]
    # 3. training documents: titled abstracts that no split searches
    searched = taken | {d.id for d in test_d + dev_d}
    train = [
        {"id": d.id, "title": " ".join(d.title.split()), "text": " ".join(d.text.split())}
        for d in order
        if titled(d) and d.id not in searched
    ]
    return Benchmark(_split(dev_q, dev_d, cfg.seed), _split(test_q, test_d, cfg.seed), train, pretrain_ids)


# ranking metrics ------------------------------------------------------------------------------------------


def relevant_ranks(scores: np.ndarray, relevant: np.ndarray) -> np.ndarray:
    """1-based rank of each query's relevant candidate in ``scores`` [queries, candidates]; a tie
    counts against it (a retriever that gives many candidates the same score has not ranked them)."""
    own = scores[np.arange(len(relevant)), relevant][:, None]
    return (scores > own).sum(1) + (scores == own).sum(1)


def reciprocal_ranks(ranks: np.ndarray, cutoff: int = 10) -> np.ndarray:
    """Per query, 1/rank when the relevant document is in the top ``cutoff``, else 0 (MRR@10's terms)."""
    ranks = np.asarray(ranks)
    return np.where(ranks <= cutoff, 1.0 / ranks, 0.0)


def rank_metrics(ranks: np.ndarray) -> dict:
    ranks = np.asarray(ranks)
    return {
        "mrr_at_10": round(float(reciprocal_ranks(ranks).mean()), 4),
        "recall_at_1": round(float(np.mean(ranks <= 1)), 4),
        "recall_at_10": round(float(np.mean(ranks <= 10)), 4),
        "queries": len(ranks),
    }


def pair_training_examples(bench: Benchmark, n_train: int, hard_negatives: bool, seed: int) -> list[dict]:
    """(title, abstract[, hard negative]) for the first ``n_train`` training documents in a seeded
    order. The hard negative is BM25's best-scoring *other* training abstract for the title: a
    document that shares the title's words but is not its paper, which in-batch negatives (random
    abstracts) almost never are."""
    from minisci.lexical import Bm25

    docs = list(bench.train)
    random.Random(seed).shuffle(docs)
    docs = docs[:n_train]
    if len(docs) < 2:
        raise MinisciError(f"finetune_embeddings: only {len(docs)} training documents outside the benchmark")
    rows = [{"anchor": d["title"], "positive": d["text"]} for d in docs]
    if hard_negatives:
        bm25 = Bm25.build([d["text"] for d in docs])
        for i, row in enumerate(rows):
            s = bm25.scores(row["anchor"])
            s[i] = -np.inf
            row["negative"] = docs[int(np.argmax(s))]["text"]
    return rows
