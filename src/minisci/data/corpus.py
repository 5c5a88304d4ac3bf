"""The ``sample_corpus`` stage: a seeded, deduplicated, contamination-free sample of the
pretraining pool, split into sentences by NLTK Punkt trained on the sample itself.

Contamination guard, two independent detectors:
1. the pool's own ``eval_overlap`` flag (set by the data mirror's builders), and
2. our own check: every test sentence of each guarded evaluation set with at least
   ``guard_min_words`` words is searched, as a normalised word sequence, inside every document
   (treebank bracket tokens such as ``-LRB-`` and split contractions read as in running text).
A document caught by either is never sampled; both counts are reported.

The sample is stable: each document's rank is a seeded hash of its id, and each domain takes its
clean documents of lowest rank. Declaring a dataset whose test text excludes a document therefore
replaces only that document; one that excludes no sampled document leaves the corpus unchanged.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer, PunktTrainer

from minisci.config import SampleCorpusConfig
from minisci.data.readers import POOLS, Document, NerSentence, load_pool, load_prepared, words_of
from minisci.errors import ConfigError

_WORD_RE = re.compile(r"[^\W_]+")  # letters and digits; punctuation and tokenisation differences vanish
# What treebank-style tokenisation writes differently from running text: bracket tokens (-LRB- for
# "(", ...; quotes `` '' are punctuation and vanish anyway), and the split-off "n't" ("do n't",
# "ca n't") and "cannot" ("can not"), which would otherwise leave different letter runs.
_PTB_BRACKET_RE = re.compile(r"-(?:lrb|rrb|lsb|rsb|lcb|rcb)-")  # matched after casefold
_SPLIT_NT_RE = re.compile(r"(?<=\w)\s+(?=n['\u2019]t\b)")
NER_TAPT_SENTENCES_PER_DOC = 10  # NER files without document ids (ncbi_disease): group this many sentences


def normalise_words(text: str) -> list[str]:
    """Lower-case letter/digit runs, with treebank tokens and spacing mapped back to running text,
    so a test sentence matches the document it came from however either was tokenised."""
    text = text.casefold()
    if "-" in text:  # each substitution only where it can apply: the pool is ~100 MB of text
        text = _PTB_BRACKET_RE.sub(" ", text)
    if "n't" in text or "n\u2019t" in text:
        text = _SPLIT_NT_RE.sub("", text)
    if "cannot" in text:
        text = re.sub(r"\bcannot\b", "can not", text)
    return _WORD_RE.findall(text)


# 1. load and deduplicate ------------------------------------------------------------------------


def deduplicate(docs: Iterable[Document]) -> tuple[list[Document], int]:
    """Keep the first document per id and per case/whitespace-insensitive text."""
    seen_ids, seen_text, kept, dropped = set(), set(), [], 0
    for d in docs:
        h = hashlib.sha1(" ".join(d.text.casefold().split()).encode()).digest()
        if d.id in seen_ids or h in seen_text:
            dropped += 1
            continue
        seen_ids.add(d.id)
        seen_text.add(h)
        kept.append(d)
    return kept, dropped


# 2. contamination guard ---------------------------------------------------------------------------


class SentenceIndex:
    """Exact containment search for many word sequences inside documents.

    Sequences are keyed by their first ``k`` words, so scanning a document costs one dict lookup
    per word position whose word starts some key, and a full comparison only on a key hit.
    """

    def __init__(self, sequences: Iterable[list[str]], k: int):
        self.k = k
        self._by_prefix: dict[tuple[str, ...], set[tuple[str, ...]]] = defaultdict(set)
        for seq in sequences:
            if len(seq) >= k:
                self._by_prefix[tuple(seq[:k])].add(tuple(seq))
        self._first = {key[0] for key in self._by_prefix}

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_prefix.values())

    def contains_any(self, words: list[str]) -> bool:
        k = self.k
        for i in range(len(words) - k + 1):
            if words[i] not in self._first:
                continue
            for seq in self._by_prefix.get(tuple(words[i : i + k]), ()):
                if tuple(words[i : i + len(seq)]) == seq:
                    return True
        return False


def test_sequences(prepared_dir: Path, datasets: tuple[str, ...]) -> dict[str, list[list[str]]]:
    """The normalised word sequences of every dataset's test split (the whole catalogue is guarded)."""
    out = {}
    for name in datasets:
        test = load_prepared(prepared_dir / name, splits=("test",)).splits["test"]
        out[name] = [normalise_words(" ".join(words_of(x))) for x in test]
    return out


def doc_words(d: Document) -> list[str]:
    body = " ".join(d.sentences) if d.sentences is not None else d.text
    return normalise_words(f"{d.title} {body}")


# 3. task-adaptive documents ------------------------------------------------------------------------


def tapt_documents(prepared_dir: Path, datasets: tuple[str, ...]) -> list[Document]:
    """Training text of evaluation tasks as extra documents (task-adaptive pretraining).

    NER sentences are detokenised by joining tokens with spaces and grouped by document id
    (or in fixed groups where the file has none); each classification text is one document.
    """
    docs = []
    for name in datasets:
        train = load_prepared(prepared_dir / name, splits=("train",)).splits["train"]
        if not train or not isinstance(train[0], NerSentence):
            docs += [
                Document(f"{name}:train:{i}", f"tapt/{name}", "tapt", "text", "", ex.text) for i, ex in enumerate(train)
            ]
            continue
        groups: dict[str, list[str]] = {}
        for i, s in enumerate(train):
            key = s.doc_id if s.doc_id is not None else f"group{i // NER_TAPT_SENTENCES_PER_DOC}"
            groups.setdefault(key, []).append(" ".join(s.tokens))
        for key, sents in groups.items():
            text = " ".join(sents)
            docs.append(
                Document(f"{name}:train:{key}", f"tapt/{name}", "tapt", "ner_sentences", "", text, sentences=sents)
            )
    return docs


# 4. sentence splitting -------------------------------------------------------------------------------


def paragraphs(d: Document) -> list[str]:
    parts = d.text.split("\n") if d.kind == "fulltext_sections" else [d.text]
    out = [" ".join(p.split()) for p in parts]
    title = " ".join(d.title.split())
    if title and not out[0].startswith(title):
        out.insert(0, title)
    return [p for p in out if p]


def train_punkt(docs: list[Document], max_chars: int) -> PunktParameters:
    """Learn abbreviations, collocations and sentence starters from the sampled text itself
    (no pretrained model is downloaded)."""
    trainer = PunktTrainer()
    budget = max_chars
    for d in docs:
        if budget <= 0:
            break
        text = "\n\n".join(paragraphs(d))[:budget]
        trainer.train(text, finalize=False)
        budget -= len(text)
    trainer.finalize_training()
    return trainer.get_params()


def punkt_to_json(params: PunktParameters) -> dict:
    return {
        "abbrev_types": sorted(params.abbrev_types),
        "collocations": sorted([list(c) for c in params.collocations]),
        "sent_starters": sorted(params.sent_starters),
        "ortho_context": dict(sorted(params.ortho_context.items())),
    }


def punkt_from_json(obj: dict) -> PunktSentenceTokenizer:
    params = PunktParameters()
    params.abbrev_types = set(obj["abbrev_types"])
    params.collocations = {tuple(c) for c in obj["collocations"]}
    params.sent_starters = set(obj["sent_starters"])
    for word, flags in obj["ortho_context"].items():
        params.ortho_context[word] = flags
    return PunktSentenceTokenizer(params)


def split_sentences(d: Document, tokenizer: PunktSentenceTokenizer, min_words: int) -> tuple[list[str], int]:
    """Sentences of a document with at least ``min_words`` words, and how many were dropped."""
    sents = d.sentences if d.sentences is not None else [s for p in paragraphs(d) for s in tokenizer.tokenize(p)]
    kept = [s for s in sents if len(s.split()) >= min_words]
    return kept, len(sents) - len(kept)


# 5. the stage -------------------------------------------------------------------------------------------


def rank(seed: int, doc_id: str, purpose: str = "draw") -> bytes:
    """A document's place in a seeded random order that depends on its id alone (not on which
    other documents are in the pool), so excluding one document never moves another."""
    return hashlib.sha256(f"{seed}:{purpose}:{doc_id}".encode()).digest()


def _choose(seed: int, docs: list[Document], k: int, domain: str) -> list[Document]:
    """The ``k`` documents of lowest seeded rank: a new exclusion replaces only what it removes."""
    if k > len(docs):
        raise ConfigError(
            f"sample_corpus: need {k} {domain} documents but the pool has only {len(docs)} after "
            "deduplication and the contamination guard; lower n_docs or change biomedical_ratio"
        )
    return sorted(docs, key=lambda d: rank(seed, d.id))[:k]


def sample_corpus(
    raw_dir: str | Path, prepared_dir: str | Path, datasets: tuple[str, ...], cfg: SampleCorpusConfig
) -> tuple[list[dict], dict, dict]:
    """The whole stage: returns the document rows, the learned Punkt parameters and metrics.
    ``datasets``: the catalogue's names, whose prepared test splits are all guarded."""
    raw_dir, prepared_dir = Path(raw_dir), Path(prepared_dir)
    unknown = sorted(set(cfg.tapt_datasets) - set(datasets))
    if unknown:
        raise ConfigError(
            f"params sample_corpus.tapt_datasets: {unknown} are not in the datasets catalogue {list(datasets)}"
        )
    # 1. load both pools and deduplicate across them (biomedical first, as the pool builders did)
    pool = load_pool(raw_dir / POOLS["biomedical"], "biomedical") + load_pool(raw_dir / POOLS["general"], "general")
    pool, n_dupes = deduplicate(pool)

    # 2. contamination guard: the pool's flag and our own containment check
    seqs = test_sequences(prepared_dir, datasets)
    guard = SentenceIndex((x for name in datasets for x in seqs[name]), cfg.guard_min_words)
    flagged = {d.id for d in pool if d.eval_overlap}
    caught_docs = [d for d in pool if guard.contains_any(doc_words(d))]
    caught = {d.id for d in caught_docs}
    # which datasets each excluded document overlaps (only the few caught ones are searched again)
    per_dataset = {n: SentenceIndex(seqs[n], cfg.guard_min_words) for n in datasets}
    excluded_per_dataset = {n: sum(g.contains_any(doc_words(d)) for d in caught_docs) for n, g in per_dataset.items()}
    clean = [d for d in pool if d.id not in flagged and d.id not in caught]

    # 3. seeded sample at the requested domain ratio: per domain, the clean documents of lowest rank
    #    (a hash of seed and id), mixed in a second seeded order that also depends on each id alone
    n_bio = round(cfg.n_docs * cfg.biomedical_ratio)
    by_domain = {dom: [d for d in clean if d.domain == dom] for dom in POOLS}
    sample = _choose(cfg.seed, by_domain["biomedical"], n_bio, "biomedical") + _choose(
        cfg.seed, by_domain["general"], cfg.n_docs - n_bio, "general"
    )
    sample.sort(key=lambda d: rank(cfg.seed, d.id, "order"))

    # 4. optional task-adaptive documents, guarded the same way
    tapt = tapt_documents(prepared_dir, cfg.tapt_datasets)
    tapt_clean = [d for d in tapt if not guard.contains_any(doc_words(d))]
    docs = sample + tapt_clean

    # 5. Punkt trained on the sample, saved so the split is reproducible; then split and filter
    punkt = punkt_to_json(train_punkt(sample, cfg.punkt_train_chars))
    tokenizer = punkt_from_json(punkt)
    stats = {dom: {"docs": 0, "sentences": 0, "words": 0} for dom in (*POOLS, "tapt")}
    dropped_short = dropped_docs = 0
    rows = []
    for d in docs:
        sents, n_dropped = split_sentences(d, tokenizer, cfg.min_sentence_words)
        dropped_short += n_dropped
        if not sents:
            dropped_docs += 1  # nothing left after the short-sentence filter
            continue
        s = stats[d.domain]
        s["docs"] += 1
        s["sentences"] += len(sents)
        s["words"] += sum(len(x.split()) for x in sents)
        rows.append({"id": d.id, "source": d.source, "domain": d.domain, "kind": d.kind, "sentences": sents})

    total = {k: sum(s[k] for s in stats.values()) for k in ("docs", "sentences", "words")}
    return (
        rows,
        punkt,
        {
            **{f"{dom}_{k}": v for dom, s in stats.items() for k, v in s.items()},
            **{f"total_{k}": v for k, v in total.items()},
            "pool_docs": len(pool) + n_dupes,
            "pool_duplicates_dropped": n_dupes,
            "guard_test_sentences": len(guard),
            "excluded_total": len(flagged | caught),
            "excluded_eval_overlap_flag": len(flagged),
            "excluded_own_check": len(caught),
            "excluded_own_check_only": len(caught - flagged),
            "excluded_flag_only": len(flagged - caught),
            "excluded_tapt_docs": len(tapt) - len(tapt_clean),
            "excluded_own_check_per_dataset": excluded_per_dataset,
            "dropped_short_sentences": dropped_short,
            "dropped_docs_without_sentences": dropped_docs,
            "punkt_abbreviations": len(punkt["abbrev_types"]),
        },
    )
