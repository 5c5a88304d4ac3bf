"""Readers, one place each: CoNLL-style NER files, JSON Lines classification files (both as the
dataset catalogue declares them), the normalised splits ``prepare_data`` writes, and the documents
of the corpus sample (``sample_corpus``'s output; the corpora of the catalogue are read by
:mod:`minisci.data.corpora`).

CoNLL quirks handled (see the data mirror's README):

* Any number of whitespace-separated columns (2-column TSV, 4-column SciBERT files, space-separated
  files); the token is the first column and the tag the declared one (default: the last). A file
  must keep one separator (tabs or spaces) and one column count, so a damaged line is caught.
* Any ``-DOCSTART-`` line marks a document (``-DOCSTART- (PMID)`` keeps the PMID as its id); it is
  not a token. Files without them (ncbi_disease) give sentences with no document id.
* Any number of blank lines between sentences (bc5cdr has two between documents).
* IOB1 (a mention may open with ``I-X``, as in SciBERT's BC5CDR copy) and IOB2. :func:`to_iob2`
  converts either to IOB2 without changing any span, so everything downstream (training labels,
  seqeval's strict IOB2 mode) works with one scheme.
"""

from __future__ import annotations

import dataclasses
import json
import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path

from minisci.errors import DataFormatError
from minisci.io import iter_jsonl, read_text_lines

_TAG_RE = re.compile(r"^(O|[BI]-\S+)$")
_PMID_RE = re.compile(r"^-DOCSTART-\s*\((\w+)\)$")


# 1. NER: CoNLL-style files -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class NerSentence:
    tokens: tuple[str, ...]
    tags: tuple[str, ...]
    doc_id: str | None  # None where the file has no document boundaries (ncbi_disease)
    line: int  # 1-based line of the first token; token k is on line + k


def _docstart_id(line: str, path: Path, n_docs: int) -> str:
    """Document id of a ``-DOCSTART-`` line: its PMID when it has one, else a positional id."""
    m = _PMID_RE.match(" ".join(line.split()[:2]))
    return m.group(1) if m else f"{path.stem}-doc{n_docs}"


def _unicode_space(line: str) -> str | None:
    """The first whitespace character other than space and tab: ``str.split`` would cut a token
    there (``a\\xa0b`` would become two columns and ``b`` would be lost)."""
    return next((c for c in line if c.isspace() and c not in " \t"), None)


def _conll_error(path: Path, lineno: int, line: str, msg: str) -> DataFormatError:
    if line.lstrip().startswith("{"):
        msg += "; the line starts with '{': it looks like JSON Lines (declare format: jsonl, task: classification)"
    return DataFormatError(path, lineno, msg)


def read_conll(path: str | Path, tag_column: int = -1) -> list[NerSentence]:
    """Read a CoNLL-style NER file; tags are returned as written (IOB1 or IOB2)."""
    path = Path(path)
    sentences: list[NerSentence] = []
    tokens: list[str] = []
    tags: list[str] = []
    start, doc_id, n_docs = 0, None, 0
    layout: tuple[str, int] | None = None  # (separator, columns) of the first token line
    for lineno, line in read_text_lines(path):
        is_docstart = line.startswith("-DOCSTART-")
        if (not line.strip() or is_docstart) and tokens:
            sentences.append(NerSentence(tuple(tokens), tuple(tags), doc_id, start))
            tokens, tags = [], []
        if not line.strip():
            continue
        if is_docstart:
            doc_id = _docstart_id(line, path, n_docs)
            n_docs += 1
            continue
        space = _unicode_space(line)
        if space is not None:
            name = unicodedata.name(space, "control character").lower()
            raise DataFormatError(
                path,
                lineno,
                f"contains a {name} (U+{ord(space):04X}); columns are separated by tabs or spaces only, "
                f"and a token cannot contain a space: {line[:200]!r}{' ...' if len(line) > 200 else ''}",
            )
        fields = line.split()
        sep = "tab" if "\t" in line else "space"
        if layout is None:
            if len(fields) < 2 or not -len(fields) <= tag_column < len(fields):
                raise _conll_error(
                    path,
                    lineno,
                    line,
                    f"expected a token and a tag in {'the last column' if tag_column == -1 else f'column {tag_column}'} "
                    f"(tag_column), got {len(fields)} column(s): {line[:200]!r}{' ...' if len(line) > 200 else ''}",
                )
            layout = (sep, len(fields))
        if (sep, len(fields)) != layout:
            raise _conll_error(
                path,
                lineno,
                line,
                f"expected {layout[1]} {layout[0]}-separated columns like the first token line, "
                f"got {len(fields)} {sep}-separated: {line[:200]!r}{' ...' if len(line) > 200 else ''}",
            )
        token, tag = fields[0], fields[tag_column]
        if not _TAG_RE.match(tag):
            raise _conll_error(
                path,
                lineno,
                line,
                f"invalid tag {tag!r} in {'the last column' if tag_column == -1 else f'column {tag_column}'} "
                "(tag_column); expected O, B-<type> or I-<type>",
            )
        if not tokens:
            start = lineno
        tokens.append(token)
        tags.append(tag)
    if tokens:
        sentences.append(NerSentence(tuple(tokens), tuple(tags), doc_id, start))
    if not sentences:
        raise DataFormatError(path, None, "no sentences found (empty file?)")
    return sentences


def _opens_span(tag: str, prev: str) -> bool:
    """An ``I-X`` that does not continue an ``X`` mention: legal in IOB1, an error in IOB2."""
    return tag.startswith("I-") and (prev == "O" or prev[2:] != tag[2:])


def detect_scheme(sentences: list[NerSentence]) -> str:
    """IOB1 if any mention opens with ``I-X``, else IOB2 (on such files the two read the same)."""
    for s in sentences:
        prev = "O"
        for tag in s.tags:
            if _opens_span(tag, prev):
                return "IOB1"
            prev = tag
    return "IOB2"


def check_iob2(sentences: list[NerSentence], path: str | Path) -> None:
    """Raise at the first ``I-X`` that does not continue an ``X`` mention (not valid IOB2)."""
    for s in sentences:
        prev = "O"
        for k, tag in enumerate(s.tags):
            if _opens_span(tag, prev):
                raise DataFormatError(
                    path,
                    s.line + k,
                    f"tag {tag!r} after {prev!r} is outside the declared IOB2 scheme (IOB1? set scheme: IOB1 or auto)",
                )
            prev = tag


def to_iob2(tags: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Convert IOB1 (or already-IOB2) tags to IOB2 with the same spans.

    An ``I-X`` that follows ``O`` or a tag of another type opens a span (IOB1 semantics, as in
    AllenNLP's conll2003 reader that SciBERT used), so it becomes ``B-X``. ``B-X`` always opens one.
    """
    out = []
    prev = "O"
    for tag in tags:
        if _opens_span(tag, prev):
            tag = "B-" + tag[2:]
        out.append(tag)
        prev = tag
    return tuple(out)


def keep_types(tags: tuple[str, ...], types: set[str]) -> tuple[str, ...]:
    """IOB2 tags with every mention of a type outside ``types`` turned into ``O``."""
    return tuple(t if t == "O" or t[2:] in types else "O" for t in tags)


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


def entity_types(sentences: list[NerSentence]) -> list[str]:
    return sorted({t[2:] for s in sentences for t in s.tags if t != "O"})


# 2. classification: JSON Lines --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Example:
    text: str
    label: str
    line: int


class _DuplicateKeys:
    """``json`` object hook that builds the dict as ``json`` does (the last value wins) and notes
    the keys that occurred more than once."""

    def __init__(self):
        self.found: list[str] = []

    def __call__(self, pairs: list[tuple[str, object]]) -> dict:
        keys = [k for k, _ in pairs]
        self.found += sorted({k for k in keys if keys.count(k) > 1})
        return dict(pairs)


def read_classification(
    path: str | Path, text_field: str = "text", label_field: str = "label", warnings: list[str] | None = None
) -> list[Example]:
    """Read JSON Lines with a text and a label field (texts may contain newlines; labels may be
    strings or integers, read as strings). An object with a duplicate key keeps the last value, as
    JSON parsers do, and adds a line to ``warnings``."""
    out = []
    duplicates = _DuplicateKeys()
    for lineno, obj in iter_jsonl(path, object_pairs_hook=duplicates):
        if duplicates.found:
            if warnings is not None:
                keys = ", ".join(repr(k) for k in duplicates.found)
                warnings.append(f"{path}:{lineno}: duplicate key {keys} in one JSON object; the last value is used")
            duplicates.found = []
        if not isinstance(obj, dict):
            raise DataFormatError(path, lineno, f"expected a JSON object with '{text_field}' and '{label_field}'")
        text = obj.get(text_field)
        if not isinstance(text, str) or not text.strip():
            raise DataFormatError(path, lineno, f"expected a non-empty string field '{text_field}'")
        if label_field not in obj:
            raise DataFormatError(path, lineno, f"missing label field '{label_field}'")
        label = obj[label_field]
        if isinstance(label, bool) or not isinstance(label, (str, int)) or not str(label).strip():
            raise DataFormatError(
                path, lineno, f"label field '{label_field}' must be a non-empty string or an integer, got {label!r}"
            )
        out.append(Example(text, str(label), lineno))
    if not out:
        raise DataFormatError(path, None, "no examples found (empty file?)")
    return out


# 3. the normalised splits that prepare_data writes -------------------------------------------------------

META = "dataset.json"


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A prepared dataset: its metadata (task, labels, sources, counts) and its splits."""

    meta: dict
    splits: dict  # split -> list[NerSentence] or list[Example]

    @property
    def name(self) -> str:
        return self.meta["name"]

    @property
    def labels(self) -> list[str]:
        return self.meta["labels"]


def load_prepared(directory: str | Path, task: str | None = None, splits: tuple[str, ...] | None = None) -> Prepared:
    """Read ``prepare_data``'s output (``dataset.json`` and one JSONL file per split; only
    ``splits`` when given)."""
    directory = Path(directory)
    meta_path = directory / META
    if not meta_path.is_file():
        raise DataFormatError(meta_path, None, "not found: run `dvc repro prepare_data` (or check the path)")
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    if task is not None and meta.get("task") != task:
        raise DataFormatError(
            meta_path, None, f"dataset '{meta.get('name')}' is a {meta.get('task')} dataset, not {task}"
        )
    out = {}
    for split in splits or meta["splits"]:
        rows = [row for _, row in iter_jsonl(directory / f"{split}.jsonl")]
        # a row's fields say what it is: a tagged sentence (NER) or a labelled text
        out[split] = [
            NerSentence(tuple(r["tokens"]), tuple(r["tags"]), r["doc_id"], r["line"])
            if "tokens" in r
            else Example(r["text"], r["label"], r["line"])
            for r in rows
        ]
    return Prepared(meta, out)


def words_of(example: NerSentence | Example) -> list[str]:
    """The whitespace words of an example (contamination guard, task-adaptive pretraining)."""
    return list(example.tokens) if isinstance(example, NerSentence) else example.text.split()


# Pretraining documents -------------------------------------------------------------------------------


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


def iter_sample(path: str | Path) -> Iterator[dict]:
    """The documents of a ``sample_corpus`` documents file, streamed, each line checked: an ``id`` and
    at least one non-empty sentence."""
    for lineno, obj in iter_jsonl(path):
        sents = obj.get("sentences")
        if not isinstance(obj.get("id"), str) or not isinstance(sents, list) or not sents:
            raise DataFormatError(
                path, lineno, "expected {'id': str, 'sentences': [str, ...]} with at least one sentence"
            )
        if not all(isinstance(s, str) and s.strip() for s in sents):
            raise DataFormatError(path, lineno, "every sentence must be a non-empty string")
        yield obj


def read_documents(path: str | Path) -> list[dict]:
    """Every document of a ``sample_corpus`` documents file (:func:`iter_sample`); at least two."""
    docs = list(iter_sample(path))
    if len(docs) < 2:
        raise DataFormatError(path, None, f"need at least 2 documents to build NotNext pairs, found {len(docs)}")
    return docs
