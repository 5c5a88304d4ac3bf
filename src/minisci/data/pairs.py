"""The ``make_pairs`` stage: next-sentence-prediction examples, built as in BERT's
``create_pretraining_data.py``.

For each document, sentences are gathered into a chunk until it reaches a word budget
(``max_words``; with probability ``short_seq_prob`` a shorter random budget, so the model also
sees short inputs). The chunk is split at a random sentence boundary into segment A and the rest.
With probability 0.5 segment B is that rest (IsNext, label 0 as in Hugging Face's
``next_sentence_label``); otherwise B is a span of sentences from a *different* document (NotNext,
label 1) and the unused sentences of the chunk go back to be used by the next chunk.

Held-out pairs come from held-out *documents*, so pretraining evaluation never sees a sentence
that training saw.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

from minisci.config import MakePairsConfig
from minisci.data.readers import read_documents
from minisci.errors import MinisciError

IS_NEXT, NOT_NEXT = 0, 1  # Hugging Face BertForPreTraining convention
MIN_SHORT_WORDS = 8  # smallest budget drawn for a "short" example


def _n_words(sents: list[str]) -> int:
    return sum(len(s.split()) for s in sents)


def _random_span(rng: random.Random, sents: list[str], budget: int) -> list[str]:
    start = rng.randrange(len(sents))
    span = [sents[start]]
    for s in sents[start + 1 :]:
        if _n_words(span) >= budget:
            break
        span.append(s)
    return span


def document_pairs(rng: random.Random, docs: list[dict], idx: int, cfg: MakePairsConfig):
    """Yield the pairs of document ``docs[idx]``; NotNext segments come from other documents."""
    sents = docs[idx]["sentences"]
    # With a per-document cap, start at a random sentence (leaving at least two) so repeated
    # passes see other parts of long documents.
    i = rng.randrange(max(1, len(sents) - 1)) if cfg.max_pairs_per_doc else 0
    while i < len(sents):
        # 1. the word budget for this example
        budget = cfg.max_words
        if rng.random() < cfg.short_seq_prob:
            budget = rng.randint(MIN_SHORT_WORDS, cfg.max_words)
        # 2. a chunk of consecutive sentences filling the budget
        j, chunk = i, []
        while j < len(sents) and _n_words(chunk) < budget:
            chunk.append(sents[j])
            j += 1
        if len(chunk) < 2:  # one sentence cannot be split into A and B
            i = j
            continue
        a_end = rng.randint(1, len(chunk) - 1)
        a = chunk[:a_end]
        # 3. B: the true continuation, or a span of another document
        if rng.random() < 0.5:
            b, label, other = chunk[a_end:], IS_NEXT, idx
            i = j
        else:
            other = rng.randrange(len(docs) - 1)
            other += other >= idx  # uniform over the other documents
            b = _random_span(rng, docs[other]["sentences"], max(1, budget - _n_words(a)))
            label = NOT_NEXT
            i += a_end  # the unused sentences go back for the next example
        yield {"a": " ".join(a), "b": " ".join(b), "label": label, "doc_a": docs[idx]["id"], "doc_b": docs[other]["id"]}


def build_pairs(docs: list[dict], n: int, cfg: MakePairsConfig, rng: random.Random) -> list[dict]:
    """``n`` pairs from ``docs``, visiting documents in a seeded random order; further passes
    (with new random chunking) only if one pass is not enough."""
    pairs: list[dict] = []
    while len(pairs) < n:
        before = len(pairs)
        order = list(range(len(docs)))
        rng.shuffle(order)
        for idx in order:
            for k, pair in enumerate(document_pairs(rng, docs, idx, cfg)):
                if cfg.max_pairs_per_doc and k == cfg.max_pairs_per_doc:
                    break
                pairs.append(pair)
                if len(pairs) == n:
                    return pairs
        if len(pairs) == before:
            raise MinisciError("make_pairs: no document has two sentences; cannot build sentence pairs")
    return pairs


def split_documents(docs: list[dict], fraction: float, rng: random.Random) -> tuple[list[dict], list[dict]]:
    order = list(range(len(docs)))
    rng.shuffle(order)
    n_held = min(max(2, math.ceil(fraction * len(docs))), len(docs) - 2)
    held = sorted(order[:n_held])
    train = sorted(order[n_held:])
    return [docs[i] for i in train], [docs[i] for i in held]


def pair_stats(pairs: list[dict], domain_of: dict[str, str]) -> dict:
    n = len(pairs)
    by_domain: dict[str, int] = {}
    for p in pairs:
        d = domain_of.get(p["doc_a"], "unknown")
        by_domain[d] = by_domain.get(d, 0) + 1
    return {
        "pairs": n,
        "isnext_fraction": round(sum(p["label"] == IS_NEXT for p in pairs) / n, 4),
        "mean_words": round(sum(len(p["a"].split()) + len(p["b"].split()) for p in pairs) / n, 2),
        "docs_used": len({p["doc_a"] for p in pairs}),
        **{f"pairs_{d}": c for d, c in sorted(by_domain.items())},
    }


def make_pairs(documents: str | Path, cfg: MakePairsConfig) -> tuple[list[dict], list[dict], dict]:
    """The whole stage: training pairs, held-out pairs and metrics."""
    docs = read_documents(documents)
    train_docs, held_docs = split_documents(docs, cfg.heldout_doc_fraction, random.Random(f"{cfg.seed}-split"))
    train = build_pairs(train_docs, cfg.n_pairs, cfg, random.Random(f"{cfg.seed}-train"))
    held = build_pairs(held_docs, cfg.n_heldout_pairs, cfg, random.Random(f"{cfg.seed}-heldout"))
    domain_of = {d["id"]: d.get("domain", "unknown") for d in docs}
    return (
        train,
        held,
        {
            "train": pair_stats(train, domain_of),
            "heldout": pair_stats(held, domain_of),
            "train_docs": len(train_docs),
            "heldout_docs": len(held_docs),
        },
    )
