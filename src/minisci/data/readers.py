"""Readers for the evaluation data, one place each: CoNLL-style NER files and SciCite JSON Lines.

Quirks handled (see the data mirror's README):

* 4-column SciBERT files (``token POS chunk NER``) and 2-column TSV (``token tag``); the tag is
  always the last column, and one file must not mix column counts.
* Three ``-DOCSTART-`` forms: ``-DOCSTART- (PMID)`` (bc5cdr, one field), ``-DOCSTART-<TAB>O``
  (jnlpba) and the CoNLL-2003 ``-DOCSTART- -X- -X- O``. They mark documents and are not tokens.
  ncbi_disease has none, so its sentences carry no document id.
* Any number of blank lines between sentences (bc5cdr has two between documents).
* SciBERT's BC5CDR copy is IOB1 (single-token mentions are ``I-Entity``); the others are IOB2.
  :func:`to_iob2` converts either to IOB2 without changing any span, so everything downstream
  (training labels, seqeval's strict IOB2 mode) works with one scheme.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from pathlib import Path

from minisci.errors import DataFormatError
from minisci.io import iter_jsonl

_TAG_RE = re.compile(r"^(O|[BI]-[^\s]+)$")
_PMID_RE = re.compile(r"^-DOCSTART-\s*\((\w+)\)$")


@dataclasses.dataclass(frozen=True)
class NerSentence:
    tokens: tuple[str, ...]
    tags: tuple[str, ...]
    doc_id: str | None  # None where the file has no document boundaries (ncbi_disease)
    line: int  # 1-based line of the first token, for error messages


@dataclasses.dataclass(frozen=True)
class NerDataset:
    """Where a NER set lives under the data root and which tag scheme its files use."""

    name: str
    directory: str
    suffix: str
    scheme: str  # "IOB1" or "IOB2"

    def path(self, root: str | Path, split: str) -> Path:
        return Path(root) / self.directory / f"{split}{self.suffix}"


NER_DATASETS = {
    "bc5cdr": NerDataset("bc5cdr", "ner/bc5cdr", ".txt", "IOB1"),
    "bc5cdr_typed": NerDataset("bc5cdr_typed", "ner/bc5cdr_typed", ".tsv", "IOB2"),
    "ncbi_disease": NerDataset("ncbi_disease", "ner/ncbi_disease", ".txt", "IOB2"),
    "jnlpba": NerDataset("jnlpba", "ner/jnlpba", ".txt", "IOB2"),
}
SCICITE_DIR = "classification/scicite"
SCICITE_LABELS = ("background", "method", "result")
SPLITS = ("train", "dev", "test")


def _docstart_id(line: str, path: Path, lineno: int, n_docs: int) -> str:
    """Document id from a DOCSTART line; a positional id when the line carries no PMID."""
    parts = line.split()  # tabs or spaces: "-DOCSTART- (PMID)", "-DOCSTART-\tO", "-DOCSTART- -X- -X- O"
    m = _PMID_RE.match(" ".join(parts[:2])) if len(parts) == 2 else None
    if m:
        return m.group(1)
    if parts[0] == "-DOCSTART-" and parts[1:] in ([], ["O"], ["-X-", "-X-", "O"]):
        return f"{path.stem}-doc{n_docs}"
    raise DataFormatError(path, lineno, f"unrecognised -DOCSTART- line {line!r}")


def read_conll(path: str | Path) -> list[NerSentence]:
    """Read a CoNLL-style NER file; tags are returned as written (IOB1 or IOB2)."""
    path = Path(path)
    if not path.is_file():
        raise DataFormatError(path, None, "file not found")
    sentences: list[NerSentence] = []
    tokens: list[str] = []
    tags: list[str] = []
    start = 0
    doc_id: str | None = None
    n_docs = 0
    ncols: int | None = None
    with path.open(encoding="utf-8") as f:
        for lineno, raw in enumerate(f, start=1):
            line = raw.rstrip("\n")
            is_docstart = line.startswith("-DOCSTART-")
            if (not line.strip() or is_docstart) and tokens:
                sentences.append(NerSentence(tuple(tokens), tuple(tags), doc_id, start))
                tokens, tags = [], []
            if not line.strip():
                continue
            if is_docstart:
                doc_id = _docstart_id(line, path, lineno, n_docs)
                n_docs += 1
                continue
            fields = line.split("\t")
            if ncols is None:
                if len(fields) not in (2, 4):
                    raise DataFormatError(
                        path,
                        lineno,
                        f"expected 2 or 4 tab-separated columns (token ... tag), got {len(fields)}: {line!r}",
                    )
                ncols = len(fields)
            if len(fields) != ncols:
                raise DataFormatError(
                    path,
                    lineno,
                    f"expected {ncols} tab-separated columns like the lines before, got {len(fields)}: {line!r}",
                )
            token, tag = fields[0], fields[-1]
            if not token or any(c.isspace() for c in token):
                raise DataFormatError(path, lineno, f"empty token or token with whitespace: {token!r}")
            if not _TAG_RE.match(tag):
                raise DataFormatError(path, lineno, f"invalid tag {tag!r}; expected O, B-<type> or I-<type>")
            if not tokens:
                start = lineno
            tokens.append(token)
            tags.append(tag)
    if tokens:
        sentences.append(NerSentence(tuple(tokens), tuple(tags), doc_id, start))
    if not sentences:
        raise DataFormatError(path, None, "no sentences found (empty file?)")
    return sentences


def to_iob2(tags: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Convert IOB1 (or already-IOB2) tags to IOB2 with the same spans.

    An ``I-X`` that follows ``O`` or a tag of another type opens a span (IOB1 semantics, as in
    AllenNLP's conll2003 reader that SciBERT used), so it becomes ``B-X``. ``B-X`` always opens one.
    """
    out = []
    prev = "O"
    for tag in tags:
        if tag.startswith("I-") and (prev == "O" or prev[2:] != tag[2:]):
            tag = "B-" + tag[2:]
        out.append(tag)
        prev = tag
    return tuple(out)


def spans(tags: tuple[str, ...] | list[str]) -> list[tuple[str, int, int]]:
    """Entity spans ``(type, start, end_exclusive)`` of an IOB2 tag sequence."""
    result = []
    start = etype = None
    for i, tag in enumerate(list(tags) + ["O"]):
        if start is not None and not (tag.startswith("I-") and tag[2:] == etype):
            result.append((etype, start, i))
            start = etype = None
        if tag.startswith("B-") or (tag.startswith("I-") and start is None):
            start, etype = i, tag[2:]
    return result


def load_ner_split(name: str, split: str, root: str | Path) -> list[NerSentence]:
    """Read one split of a registered NER set with its tags normalised to IOB2."""
    if name not in NER_DATASETS:
        raise KeyError(f"unknown NER dataset {name!r}; known: {sorted(NER_DATASETS)}")
    sentences = read_conll(NER_DATASETS[name].path(root, split))
    return [dataclasses.replace(s, tags=to_iob2(s.tags)) for s in sentences]


def ner_stats(sentences: list[NerSentence]) -> dict:
    """Counts in the shape of the data README's tables (entity counts per type from IOB2 spans)."""
    types = Counter(t for s in sentences for (t, _, _) in spans(s.tags))
    return {
        "sentences": len(sentences),
        "tokens": sum(len(s.tokens) for s in sentences),
        "documents": len({s.doc_id for s in sentences if s.doc_id is not None}),
        "entities": sum(types.values()),
        "entities_per_type": dict(sorted(types.items())),
    }


@dataclasses.dataclass(frozen=True)
class CitationExample:
    text: str
    label: str
    line: int


def read_scicite(path: str | Path, labels: tuple[str, ...] = SCICITE_LABELS) -> list[CitationExample]:
    """Read SciCite JSON Lines (``text``, ``label``; texts may contain newlines)."""
    out = []
    for lineno, obj in iter_jsonl(path):
        text, label = obj.get("text"), obj.get("label")
        if not isinstance(text, str) or not text.strip():
            raise DataFormatError(path, lineno, "expected a non-empty string field 'text'")
        if label not in labels:
            raise DataFormatError(path, lineno, f"unknown label {label!r}; expected one of {list(labels)}")
        out.append(CitationExample(text, label, lineno))
    if not out:
        raise DataFormatError(path, None, "file is empty; expected SciCite JSON lines")
    return out


def load_scicite_split(split: str, root: str | Path) -> list[CitationExample]:
    return read_scicite(Path(root) / SCICITE_DIR / f"{split}.jsonl")


def eval_texts(name: str, split: str, root: str | Path) -> list[list[str]]:
    """The word sequences of one split of an evaluation set (for contamination checks and TAPT)."""
    if name in NER_DATASETS:
        return [list(s.tokens) for s in read_conll(NER_DATASETS[name].path(root, split))]
    if name == "scicite":
        return [ex.text.split() for ex in load_scicite_split(split, root)]
    raise KeyError(f"unknown evaluation dataset {name!r}")


def ner_to_dataset(sentences: list[NerSentence]):
    """A ``datasets.Dataset`` with ``tokens``, ``tags`` and ``doc_id`` columns, for ``map``-based
    tokenisation and caching in the training stages."""
    import datasets

    return datasets.Dataset.from_dict(
        {
            "tokens": [list(s.tokens) for s in sentences],
            "tags": [list(s.tags) for s in sentences],
            "doc_id": [s.doc_id or "" for s in sentences],
        }
    )


def scicite_to_dataset(examples: list[CitationExample]):
    import datasets

    return datasets.Dataset.from_dict({"text": [e.text for e in examples], "label": [e.label for e in examples]})


# Pretraining documents -------------------------------------------------------------------------------

POOLS = {"biomedical": "corpus/biomedical.jsonl", "general": "corpus/general.jsonl"}


@dataclasses.dataclass
class Document:
    id: str
    source: str
    domain: str  # biomedical | general | tapt
    kind: str
    title: str
    text: str
    eval_overlap: bool = False
    sentences: list[str] | None = None  # pre-split (TAPT NER documents); else filled by Punkt


def load_pool(path: str | Path, domain: str) -> list[Document]:
    docs = []
    for lineno, obj in iter_jsonl(path):
        for key, tp in (("id", str), ("text", str), ("source", str), ("kind", str), ("eval_overlap", bool)):
            if not isinstance(obj.get(key), tp):
                raise DataFormatError(path, lineno, f"expected field '{key}' of type {tp.__name__}")
        if not obj["text"].strip():
            raise DataFormatError(path, lineno, "empty 'text'")
        docs.append(
            Document(
                obj["id"], obj["source"], domain, obj["kind"], obj.get("title") or "", obj["text"], obj["eval_overlap"]
            )
        )
    if not docs:
        raise DataFormatError(path, None, "pool file is empty")
    return docs


def read_documents(path: str | Path) -> list[dict]:
    docs = []
    for lineno, obj in iter_jsonl(path):
        sents = obj.get("sentences")
        if not isinstance(obj.get("id"), str) or not isinstance(sents, list) or not sents:
            raise DataFormatError(
                path, lineno, "expected {'id': str, 'sentences': [str, ...]} with at least one sentence"
            )
        if not all(isinstance(s, str) and s.strip() for s in sents):
            raise DataFormatError(path, lineno, "every sentence must be a non-empty string")
        docs.append(obj)
    if len(docs) < 2:
        raise DataFormatError(path, None, f"need at least 2 documents to build NotNext pairs, found {len(docs)}")
    return docs
