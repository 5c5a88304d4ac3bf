"""The ``sample_corpus`` stage: a seeded, deduplicated, contamination-free sample of the
pretraining corpora of the ``corpora`` catalogue, split into sentences by NLTK Punkt trained on the
sample itself.

Streamed, in bounded memory: pass 1 reads every corpus in chunks (at most 256 documents and 8 MiB of
text each, four per worker in flight), and worker processes parse each document and run the guard on
it; the main process keeps ~40 bytes per document (two 64-bit keys for duplicates, a 64-bit rank,
flags), never the text. Duplicates are then resolved, each corpus's share is chosen, and pass 2
reads only the chosen documents again: what is held then is the sample (``n_docs`` documents), not
the corpus.

Contamination guard, two independent detectors:
1. the corpus's own flag (``flag_field``; the shipped pool's ``eval_overlap``, set by the data
   mirror's builders), and
2. our own check: every test sentence of each guarded evaluation set with at least
   ``guard_min_words`` words is searched, as a normalised word sequence, inside every document
   (treebank bracket tokens such as ``-LRB-`` and split contractions read as in running text).
A document caught by either is never sampled; both counts are reported.

The sample is stable: each document's rank is a seeded hash of its id, and each corpus takes its
clean documents of lowest rank, as many as its weight gives it. Declaring a dataset whose test text
excludes a document therefore replaces only that document; one that excludes no sampled document
leaves the corpus unchanged; a new corpus takes its share and leaves the others' order alone.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import multiprocessing
import re
import signal
from array import array
from collections import defaultdict, deque
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer, PunktTrainer

from minisci.config import CORPORA_FILE, CorpusConfig, SampleCorpusConfig
from minisci.data.corpora import (
    Chunk,
    Record,
    check_first_records,
    corpus_files,
    corpus_size,
    iter_chunks,
    parse_item,
)
from minisci.data.readers import Document, NerSentence, load_prepared, words_of
from minisci.errors import ConfigError, DataFormatError
from minisci.io import write_jsonl
from minisci.progress import Progress

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


# 5. the stage: a streamed scan, then the sample -------------------------------------------------------


def rank(seed: int, doc_id: str, purpose: str = "draw") -> bytes:
    """A document's place in a seeded random order that depends on its id alone (not on which
    other documents are in the pool), so excluding one document never moves another."""
    return hashlib.sha256(f"{seed}:{purpose}:{doc_id}".encode()).digest()


def _h64(data: bytes) -> int:
    return int.from_bytes(data[:8], "big")


def text_key(text: str) -> int:
    """Duplicate key of a text: case and whitespace do not count."""
    return _h64(hashlib.sha1(" ".join(text.casefold().split()).encode()).digest())


def as_document(corpus: str, r: Record) -> Document:
    return Document(r.id, r.source, corpus, r.kind, r.title, r.text, r.flagged)


class _Scanner:
    """Pass 1 on one chunk: parse and check every item, and what the sample needs of it: id and text
    keys (duplicates), the seeded rank, the corpus's flag and the guard's verdict. Runs in worker
    processes; returns small tuples, or the one-line error of the first malformed item."""

    def __init__(self, corpora: dict, files: dict, guard: SentenceIndex, per_dataset: dict, seed: int):
        self.corpora, self.files, self.guard, self.per_dataset, self.seed = corpora, files, guard, per_dataset, seed

    def __call__(self, chunk: Chunk):
        cfg = self.corpora[chunk.corpus]
        path = self.files[chunk.corpus][chunk.file]
        out = []
        try:
            for i in range(len(chunk.items)):
                r = parse_item(chunk, i, cfg, path)
                if r is None:
                    out.append(None)  # dropped by the entry's filter
                    continue
                words = doc_words(as_document(chunk.corpus, r))
                caught = self.guard.contains_any(words)
                hits = tuple(n for n, g in self.per_dataset.items() if g.contains_any(words)) if caught else ()
                out.append(
                    (chunk.first + i, _h64(hashlib.sha1(r.id.encode()).digest()), text_key(r.text),
                     _h64(rank(self.seed, r.id)), r.flagged, caught, hits, bool(r.title))
                )  # fmt: skip
        except DataFormatError as e:  # its __init__ signature does not survive pickling: send its parts
            where = f"{e.path}:{e.line}" if e.line is not None else f"{e.path}"
            return (e.path, e.line, str(e)[len(where) + 2 :])
        return out


_WORKER = None  # the worker process's job: set once per process by the pool's initializer


def _init_worker(job) -> None:
    global _WORKER
    _WORKER = job
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle: it ends the pool


def _run_in_worker(arg):
    return _WORKER(arg)


def ordered_map(job, items: Iterable, num_proc: int) -> Iterator:
    """``map(job, items)`` in order, over ``num_proc`` processes, with a bounded number of items in
    flight (``Pool.imap`` would read the whole input ahead into memory)."""
    if num_proc <= 1:
        yield from map(job, items)
        return
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else None)
    with ctx.Pool(num_proc, initializer=_init_worker, initargs=(job,)) as pool:
        pending: deque = deque()
        for item in items:
            pending.append(pool.apply_async(_run_in_worker, (item,)))
            if len(pending) >= 4 * num_proc:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()


@dataclasses.dataclass
class Scan:
    """Pass 1's result: one entry per document read (after filters), in reading order, in compact arrays."""

    corpus: array = dataclasses.field(default_factory=lambda: array("H"))
    file: array = dataclasses.field(default_factory=lambda: array("I"))
    pos: array = dataclasses.field(default_factory=lambda: array("Q"))
    id_key: array = dataclasses.field(default_factory=lambda: array("Q"))
    text_key: array = dataclasses.field(default_factory=lambda: array("Q"))
    rank: array = dataclasses.field(default_factory=lambda: array("Q"))
    flagged: array = dataclasses.field(default_factory=lambda: array("b"))
    caught: array = dataclasses.field(default_factory=lambda: array("b"))
    hits: dict = dataclasses.field(default_factory=dict)  # index -> datasets whose test text it contains
    filtered: dict = dataclasses.field(default_factory=dict)  # corpus -> documents its filter dropped


def scan_corpora(
    corpora: dict[str, CorpusConfig], root: Path, guard: SentenceIndex, per_dataset: dict, seed: int, num_proc: int
) -> Scan:
    """Pass 1 over every corpus, in catalogue order, in a stream (progress on stdout)."""
    check_first_records(corpora, root)
    files = {
        name: corpus_files(cfg, root) if cfg.format != "txt" else [root / cfg.location] for name, cfg in corpora.items()
    }
    scanner = _Scanner(corpora, files, guard, per_dataset, seed)
    scan = Scan()
    for c, (name, cfg) in enumerate(corpora.items()):
        total, unit = corpus_size(cfg, root)
        progress = Progress(f"sample_corpus: scan {name}", total, unit)
        scan.filtered[name], before, titled = 0, len(scan.rank), 0
        for chunk, result in zip_chunks(iter_chunks(name, cfg, root), scanner, num_proc):
            if isinstance(result, tuple):  # the first malformed item of the chunk
                raise DataFormatError(*result)
            for row in result:
                if row is None:
                    scan.filtered[name] += 1
                    continue
                pos, id_key, txt_key, rnk, flagged, caught, hits, has_title = row
                titled += has_title
                if hits:
                    scan.hits[len(scan.rank)] = hits
                for arr, v in ((scan.corpus, c), (scan.file, chunk.file), (scan.pos, pos), (scan.id_key, id_key),
                               (scan.text_key, txt_key), (scan.rank, rnk), (scan.flagged, flagged), (scan.caught, caught)):  # fmt: skip
                    arr.append(v)
            progress.update(len(scan.rank) - before, chunk.done)  # what is scanned, not what is read ahead
        progress.close()
        if len(scan.rank) == before and not scan.filtered[name]:
            raise DataFormatError(
                root / cfg.location,
                None,
                f"holds no documents (corpora.{name}): fill it, or take the entry out of the catalogue",
            )
        if cfg.title_field is not None and len(scan.rank) > before and not titled:
            raise DataFormatError(
                root / cfg.location,
                None,
                f"no document has a title in field '{cfg.title_field}' (corpora.{name}.title_field): "
                "check the field's name, or leave title_field out",
            )
    return scan


def zip_chunks(chunks: Iterator[Chunk], scanner: _Scanner, num_proc: int) -> Iterator[tuple[Chunk, list]]:
    """Each chunk with its scan result, in order. Only the chunk's file and position are kept
    beside it, not its items, so the items in flight stay in the workers' queue."""
    meta: deque = deque()

    def tee():
        for chunk in chunks:
            meta.append(Chunk(chunk.corpus, chunk.file, chunk.first, [], chunk.done))
            yield chunk

    for result in ordered_map(scanner, tee(), num_proc):
        yield meta.popleft(), result


def duplicates(id_key: np.ndarray, text_key: np.ndarray) -> np.ndarray:
    """Which documents are dropped as duplicates: as a sequential pass that keeps the first
    document per id and per text (among the kept ones) would, but that pass runs only over the
    documents whose id or text occurs more than once; the others are kept whatever comes before."""
    dup = np.zeros(len(id_key), dtype=bool)
    involved = np.zeros(len(id_key), dtype=bool)
    for keys in (id_key, text_key):
        _, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
        involved |= counts[inverse] > 1
    seen_ids, seen_text = set(), set()
    for i in np.flatnonzero(involved):
        if id_key[i] in seen_ids or text_key[i] in seen_text:
            dup[i] = True
            continue
        seen_ids.add(id_key[i])
        seen_text.add(text_key[i])
    return dup


def id_conflict(id_key: np.ndarray, text_key: np.ndarray) -> tuple[int, int] | None:
    """The first two documents (indices, in reading order) that share an id but not a text, if any:
    an id names one document, so two texts under one id are bad input, not a duplicate."""
    pairs = np.unique(np.stack([id_key, text_key], axis=1), axis=0)
    ids, counts = np.unique(pairs[:, 0], return_counts=True)
    shared = ids[counts > 1]
    if not len(shared):
        return None
    idx = np.flatnonzero(np.isin(id_key, shared))
    first: dict[int, int] = {}
    for i in idx:  # reading order: the earliest document whose id an earlier, different text holds
        j = first.setdefault(int(id_key[i]), int(i))
        if text_key[i] != text_key[j]:
            return j, int(i)
    return None  # not reached: a shared id has two texts


def item_location(corpora: dict[str, CorpusConfig], root: Path, scan: Scan, i: int) -> str:
    """Where document ``i`` of a scan lies: ``file:line`` (JSON Lines), ``file: row N`` or the text file."""
    name = list(corpora)[scan.corpus[i]]
    cfg, pos = corpora[name], scan.pos[i]
    if cfg.format == "txt":
        return str(corpus_files(cfg, root)[pos - 1])
    path = corpus_files(cfg, root)[scan.file[i]]
    return f"{path}:{pos}" if cfg.format == "jsonl" else f"{path}: row {pos}"


def shares(n: int, weights: dict[str, float]) -> dict[str, int]:
    """``n`` documents shared by weight: the floors, then one more for the largest remainders (ties
    to the earlier corpus), so the counts sum to ``n`` and follow the weights as closely as whole
    documents can."""
    total = sum(weights.values())
    exact = {k: n * w / total for k, w in weights.items()}
    out = {k: math.floor(v) for k, v in exact.items()}
    by_remainder = sorted(exact, key=lambda k: -(exact[k] - out[k]))
    for k in by_remainder[: n - sum(out.values())]:
        out[k] += 1
    return out


def choose(scan: Scan, clean: np.ndarray, names: list[str], counts: dict[str, int]) -> dict[int, np.ndarray]:
    """Per corpus, the indices of its ``k`` clean documents of lowest seeded rank: a new exclusion
    replaces only what it removes, and another corpus changes nothing here."""
    corpus, ranks = np.frombuffer(scan.corpus, dtype=np.uint16), np.frombuffer(scan.rank, dtype=np.uint64)
    out = {}
    for c, name in enumerate(names):
        idx = np.flatnonzero(clean & (corpus == c))
        if counts[name] > len(idx):
            read = int((corpus == c).sum())
            raise ConfigError(
                f"sample_corpus: need {counts[name]} {name} documents but the pool has only {len(idx)}: of "
                f"{read + scan.filtered[name]} read, its filter dropped {scan.filtered[name]}, deduplication and "
                f"the contamination guard {read - len(idx)}; lower n_docs or change corpora.{name}.weight"
            )
        out[c] = idx[np.argsort(ranks[idx], kind="stable")[: counts[name]]]
    return out


def fetch(corpora: dict[str, CorpusConfig], root: Path, scan: Scan, chosen: dict[int, np.ndarray]) -> list[Document]:
    """Pass 2: read the chosen documents again (raw items are skipped unparsed)."""
    docs = []
    for c, (name, cfg) in enumerate(corpora.items()):
        wanted = {(scan.file[i], scan.pos[i]) for i in chosen[c]}
        files = corpus_files(cfg, root) if cfg.format != "txt" else [root / cfg.location]
        total, unit = corpus_size(cfg, root)
        progress, before = Progress(f"sample_corpus: read the sample of {name}", total, unit), len(docs)
        for chunk in iter_chunks(name, cfg, root):
            for i in range(len(chunk.items)):
                if (chunk.file, chunk.first + i) in wanted:
                    docs.append(as_document(name, parse_item(chunk, i, cfg, files[chunk.file])))
            progress.update(len(docs) - before, chunk.done)
        progress.close()
    return docs


class _Splitter:
    def __init__(self, punkt: dict, min_words: int):
        self.tokenizer, self.min_words = punkt_from_json(punkt), min_words

    def __call__(self, docs: list[Document]) -> list[tuple[list[str], int]]:
        return [split_sentences(d, self.tokenizer, self.min_words) for d in docs]


def sample_corpus(
    corpora: dict[str, CorpusConfig],
    prepared_dir: str | Path,
    datasets: tuple[str, ...],
    cfg: SampleCorpusConfig,
    out_dir: str | Path,
    root: str | Path = ".",
    num_proc: int = 1,
) -> tuple[dict, dict]:
    """The whole stage: writes ``documents.jsonl`` into ``out_dir``; returns the learned Punkt
    parameters and the metrics. ``datasets``: the catalogue's names, whose prepared test splits are
    all guarded; corpus paths are relative to ``root``."""
    prepared_dir, root, names = Path(prepared_dir), Path(root), list(corpora)
    unknown = sorted(set(cfg.tapt_datasets) - set(datasets))
    if unknown:
        raise ConfigError(
            f"params sample_corpus.tapt_datasets: {unknown} are not in the datasets catalogue {list(datasets)}"
        )
    # 1. the guard: every dataset's test sentences, as one index and one per dataset
    seqs = test_sequences(prepared_dir, datasets)
    guard = SentenceIndex((x for name in datasets for x in seqs[name]), cfg.guard_min_words)
    per_dataset = {n: SentenceIndex(seqs[n], cfg.guard_min_words) for n in datasets}

    # 2. pass 1, streamed over both cores: keys, ranks, flags and the guard's verdicts, in arrays
    scan = scan_corpora(corpora, root, guard, per_dataset, cfg.seed, num_proc)
    id_keys, text_keys = np.frombuffer(scan.id_key, dtype=np.uint64), np.frombuffer(scan.text_key, dtype=np.uint64)
    conflict = id_conflict(id_keys, text_keys)
    if conflict is not None:
        first, second = (item_location(corpora, root, scan, i) for i in conflict)
        raise DataFormatError(
            second, None, f"its id is also the id of another text, at {first}: ids must be unique across the "
            "corpora catalogue (fix them, or leave id_field out for ids made from each text)",
        )  # fmt: skip
    dup = duplicates(id_keys, text_keys)
    flagged = np.frombuffer(scan.flagged, dtype=np.int8).astype(bool) & ~dup
    caught = np.frombuffer(scan.caught, dtype=np.int8).astype(bool) & ~dup
    clean = ~dup & ~flagged & ~caught

    # 3. per corpus, its share of n_docs: the clean documents of lowest rank; then pass 2 reads them,
    #    mixed in a second seeded order that also depends on each id alone
    chosen = choose(scan, clean, names, shares(cfg.n_docs, {n: c.weight for n, c in corpora.items()}))
    sample = fetch(corpora, root, scan, chosen)
    sample.sort(key=lambda d: rank(cfg.seed, d.id, "order"))

    # 4. optional task-adaptive documents, guarded the same way
    tapt = tapt_documents(prepared_dir, cfg.tapt_datasets)
    tapt_clean = [d for d in tapt if not guard.contains_any(doc_words(d))]
    docs = sample + tapt_clean

    # 5. Punkt trained on the sample, saved so the split is reproducible; then split (both cores) and write
    punkt = punkt_to_json(train_punkt(sample, cfg.punkt_train_chars))
    stats = {dom: {"docs": 0, "sentences": 0, "words": 0} for dom in (*names, "tapt")}
    dropped = {"short": 0, "docs": 0}

    def rows():
        batches = (docs[i : i + 64] for i in range(0, len(docs), 64))
        results = (
            x for batch in ordered_map(_Splitter(punkt, cfg.min_sentence_words), batches, num_proc) for x in batch
        )
        for d, (sents, n_dropped) in zip(docs, results):
            dropped["short"] += n_dropped
            if not sents:
                dropped["docs"] += 1  # nothing left after the short-sentence filter
                continue
            s = stats[d.domain]
            s["docs"] += 1
            s["sentences"] += len(sents)
            s["words"] += sum(len(x.split()) for x in sents)
            yield {"id": d.id, "source": d.source, "domain": d.domain, "kind": d.kind, "sentences": sents}

    write_jsonl(Path(out_dir) / "documents.jsonl", rows())
    return punkt, corpus_metrics(
        scan, names, dup, flagged, caught, stats, dropped, punkt, len(guard), len(tapt) - len(tapt_clean), datasets
    )


def corpus_metrics(
    scan, names, dup, flagged, caught, stats, dropped, punkt, guard_size, tapt_excluded, datasets
) -> dict:
    """The stage's metrics: the totals as before, and the same per corpus under ``corpora``."""
    corpus = np.frombuffer(scan.corpus, dtype=np.uint16)
    per_dataset = {n: 0 for n in datasets}
    per_corpus_dataset = {c: {n: 0 for n in datasets} for c in names}
    for i, hits in scan.hits.items():
        if dup[i]:
            continue
        for n in hits:
            per_dataset[n] += 1
            per_corpus_dataset[names[corpus[i]]][n] += 1
    total = {k: sum(s[k] for s in stats.values()) for k in ("docs", "sentences", "words")}
    per_corpus = {}
    for c, name in enumerate(names):
        mine = corpus == c
        per_corpus[name] = {
            **{f"sampled_{k}": v for k, v in stats[name].items()},
            "pool_docs": int(mine.sum()),
            "filtered_out": scan.filtered[name],
            "duplicates_dropped": int((dup & mine).sum()),
            "excluded_total": int(((flagged | caught) & mine).sum()),
            "excluded_flag": int((flagged & mine).sum()),
            "excluded_own_check": int((caught & mine).sum()),
            "excluded_own_check_per_dataset": per_corpus_dataset[name],
        }
    return {
        **{f"{dom}_{k}": v for dom, s in stats.items() for k, v in s.items()},
        **{f"total_{k}": v for k, v in total.items()},
        "corpora": per_corpus,
        "pool_docs": len(dup),
        "pool_duplicates_dropped": int(dup.sum()),
        "guard_test_sentences": guard_size,
        "excluded_total": int((flagged | caught).sum()),
        "excluded_eval_overlap_flag": int(flagged.sum()),
        "excluded_own_check": int(caught.sum()),
        "excluded_own_check_only": int((caught & ~flagged).sum()),
        "excluded_flag_only": int((flagged & ~caught).sum()),
        "excluded_tapt_docs": tapt_excluded,
        "excluded_own_check_per_dataset": per_dataset,
        "dropped_short_sentences": dropped["short"],
        "dropped_docs_without_sentences": dropped["docs"],
        "punkt_abbreviations": len(punkt["abbrev_types"]),
    }


def check_tracked(
    corpora: dict[str, CorpusConfig],
    dirs: list[str],
    fetched: str | Path = "data/raw",
    manifest: str | Path = "data/manifest.tsv",
    catalogue: str | Path = CORPORA_FILE,
) -> None:
    """Every corpus lies under a folder the stage depends on, or DVC would not see it change; and one
    under ``fetched`` (fetch_data's output, which DVC replaces whole) is a file it copies there (a path
    of its ``manifest``), or the next checkout would delete it."""
    roots = [Path(d).resolve() for d in dirs]
    fetched, copied = Path(fetched).resolve(), None
    for name, c in corpora.items():
        where = Path(c.location).resolve()
        if not any(where == r or r in where.parents for r in roots):
            raise ConfigError(
                f"{catalogue}: corpora.{name}: {c.location} is outside the folders sample_corpus depends on "
                f"({', '.join(dirs)}); put it under data/corpora (e.g. data/corpora/{name}) so DVC tracks it"
            )
        if fetched not in where.parents:
            continue
        if copied is None:
            from minisci.data.fetch import read_manifest

            copied = {fetched / e.path for e in read_manifest(manifest)}
        if where not in copied and not any(where in f.parents for f in copied):
            raise ConfigError(
                f"{catalogue}: corpora.{name}: {c.location} is not a file fetch_data copies ({manifest}): that "
                f"folder is fetch_data's output, which DVC replaces whole; put your own corpus under data/corpora "
                f"(e.g. data/corpora/{name})"
            )
