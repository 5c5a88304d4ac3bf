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
import hashlib
import random
import re
from array import array
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from minisci.config import CorpusConfig
from minisci.data.corpora import Tally, check_first_records, corpus_size, iter_records
from minisci.data.corpus import _h64, duplicates, rank, text_key
from minisci.data.readers import Document, read_documents
from minisci.errors import MinisciError
from minisci.progress import Progress

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
    train: list[
        dict
    ]  # titled abstracts for training pairs, the first n_train in a seeded shuffle: {"id", "title", "text"}
    train_available: int  # titled abstracts that no split searches, from which ``train`` is drawn
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


@dataclasses.dataclass
class PoolScan:
    """What the benchmark needs of each pool document, in compact arrays (reading order), so memory
    does not grow with the text of the corpora: only the chosen documents are read again."""

    id_key: array = dataclasses.field(default_factory=lambda: array("Q"))
    text_key: array = dataclasses.field(default_factory=lambda: array("Q"))
    rank: array = dataclasses.field(default_factory=lambda: array("Q"))
    words: array = dataclasses.field(default_factory=lambda: array("Q"))
    titled: array = dataclasses.field(default_factory=lambda: array("b"))
    flagged: array = dataclasses.field(default_factory=lambda: array("b"))
    sampled: array = dataclasses.field(default_factory=lambda: array("b"))

    def column(self, name: str) -> np.ndarray:
        values = getattr(self, name)
        return np.frombuffer(values, dtype=np.uint64 if values.typecode == "Q" else np.int8)


def _pool_records(corpora: dict[str, CorpusConfig], root: Path, what: str) -> Iterator[Document]:
    """Every document of the catalogue, in catalogue order, with progress."""
    check_first_records(corpora, root)
    for name, cfg in corpora.items():
        total, unit = corpus_size(cfg, root)
        progress, tally, n = Progress(f"finetune_embeddings: {what} {name}", total, unit), Tally(), 0
        for _, _, r in iter_records(name, cfg, root, tally):
            yield Document(r.id, r.source, name, r.kind, r.title, r.text, r.flagged)
            n += 1
            progress.update(n, tally.done)
        progress.close()


def scan_pool(corpora: dict[str, CorpusConfig], root: Path, pretrain_ids: set[str], seed: int) -> PoolScan:
    scan = PoolScan()
    for d in _pool_records(corpora, root, "scan the pool of"):
        for arr, v in ((scan.id_key, _h64(hashlib.sha1(d.id.encode()).digest())), (scan.text_key, text_key(d.text)),
                       (scan.rank, _h64(rank(seed, d.id, "retrieval"))), (scan.words, len(d.text.split())),
                       (scan.titled, titled(d)), (scan.flagged, d.eval_overlap), (scan.sampled, d.id in pretrain_ids)):  # fmt: skip
            arr.append(v)
    return scan


def build_benchmark(corpora: dict[str, CorpusConfig], documents, cfg, root: str | Path = ".") -> Benchmark:
    """Dev and test splits and the training documents (see the module docstring) from the catalogue's
    ``corpora`` and the corpus sample ``documents``. ``cfg``: ``n_test_queries``, ``n_dev_queries``
    (query documents), ``n_candidates``, ``n_dev_candidates`` (documents searched), ``n_train``
    (training documents, the first of the rest in a seeded shuffle), ``seed``.

    The pool (deduplicated by sample_corpus's rule: the first per id and per text; flagged documents
    left out) is read twice: once for compact facts of every document, once for the chosen ones."""
    root = Path(root)
    pretrain_ids = {d["id"] for d in read_documents(documents)}
    scan = scan_pool(corpora, root, pretrain_ids, cfg.seed)
    titled_, words = scan.column("titled").astype(bool), scan.column("words")
    dup = duplicates(scan.column("id_key"), scan.column("text_key"))
    pool = np.flatnonzero(~dup & ~scan.column("flagged").astype(bool))
    order = pool[np.argsort(scan.column("rank")[pool], kind="stable")]
    # 1. query documents: titled abstracts that pretraining never saw
    held = order[titled_[order] & ~scan.column("sampled").astype(bool)[order]]
    need = cfg.n_test_queries + cfg.n_dev_queries
    if len(held) < need:
        raise MinisciError(
            f"finetune_embeddings: only {len(held)} titled abstracts outside the corpus sample; "
            f"n_test_queries + n_dev_queries = {need}: lower them"
        )
    queries = held[:need]
    # 2. distractors: the rest of the pool in the same seeded order, no longer than a query document
    longest = int(words[queries].max())
    rest = order[~np.isin(order, queries) & (words[order] <= longest)]
    n_test_d, n_dev_d = cfg.n_candidates - cfg.n_test_queries, cfg.n_dev_candidates - cfg.n_dev_queries
    if len(rest) < n_test_d + n_dev_d:
        raise MinisciError(
            f"finetune_embeddings: n_candidates + n_dev_candidates = {cfg.n_candidates + cfg.n_dev_candidates} "
            f"candidates take {n_test_d + n_dev_d} distractors besides the {need} queries; the pool has {len(rest)} "
            f"documents outside the queries with at most {longest} words (the longest query document's): lower "
            "n_candidates or n_dev_candidates"
        )
    distractors = rest[: n_test_d + n_dev_d]
    # 3. training documents: titled abstracts that no split searches, the first n_train in a seeded shuffle
    available = order[titled_[order] & ~np.isin(order, np.concatenate([queries, distractors]))]
    shuffled = array("Q", range(len(available)))  # random.shuffle's permutation depends on the length alone
    random.Random(cfg.seed).shuffle(shuffled)
    train = available[np.frombuffer(shuffled, dtype=np.uint64)[: cfg.n_train].astype(np.int64)]
    # the chosen documents, read again
    wanted = set(np.concatenate([queries, distractors, train]).tolist())
    docs = {i: d for i, d in enumerate(_pool_records(corpora, root, "read the benchmark from")) if i in wanted}
    test_q, dev_q = [docs[i] for i in queries[: cfg.n_test_queries]], [docs[i] for i in queries[cfg.n_test_queries :]]
    test_d, dev_d = [docs[i] for i in distractors[:n_test_d]], [docs[i] for i in distractors[n_test_d:]]
    return Benchmark(
        _split(dev_q, dev_d, cfg.seed),
        _split(test_q, test_d, cfg.seed),
        [
            {"id": d.id, "title": " ".join(d.title.split()), "text": " ".join(d.text.split())}
            for d in map(docs.get, train)
        ],
        len(available),
        pretrain_ids,
    )


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


def pair_training_examples(bench: Benchmark, hard_negatives: bool) -> list[dict]:
    """(title, abstract[, hard negative]) for the benchmark's training documents. The hard negative is
    BM25's best-scoring *other* training abstract for the title: a document that shares the title's
    words but is not its paper, which in-batch negatives (random abstracts) almost never are."""
    from minisci.lexical import Bm25

    docs = bench.train
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
