"""The ``prepare_data`` stage: read one catalogue entry's files as declared (format, tag column,
tag scheme, labels, kept entity types), check them, and return normalised splits.

Everything after this stage sees one shape per task: NER sentences with IOB2 tags, or
classification examples with string labels, plus a ``dataset.json`` that records the labels, the
tag scheme (declared, or detected and said), the source files with their checksums, and counts.
A problem in the data is reported here, with the file and line, before any training starts.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter, defaultdict
from pathlib import Path

from minisci.config import SPLITS, DatasetConfig
from minisci.data.readers import (
    META,
    Example,
    NerSentence,
    check_iob2,
    detect_scheme,
    entity_types,
    keep_types,
    read_classification,
    read_conll,
    spans,
    to_iob2,
)
from minisci.errors import ConfigError, DataFormatError
from minisci.io import atomic_path, sha256_file, write_jsonl

# 1. NER -------------------------------------------------------------------------------------------------


def _ner_scheme(cfg: DatasetConfig, raw: dict[str, list[NerSentence]]) -> str:
    if cfg.scheme == "auto":
        return "IOB1" if any(detect_scheme(raw[sp]) == "IOB1" for sp in SPLITS) else "IOB2"
    if cfg.scheme == "IOB2":
        for sp in SPLITS:
            check_iob2(raw[sp], cfg.path(sp))
    return cfg.scheme


def _first_tag_line(sentences: list[NerSentence], etype: str) -> int:
    return next(s.line + k for s in sentences for k, t in enumerate(s.tags) if t[2:] == etype)


def prepare_ner(name: str, cfg: DatasetConfig) -> tuple[dict[str, list[NerSentence]], dict]:
    # 1. read as written; 2. the tag scheme; 3. IOB2 with the same spans, then the kept types
    raw = {sp: read_conll(cfg.path(sp), cfg.tag_column) for sp in SPLITS}
    scheme = _ner_scheme(cfg, raw)
    splits = {sp: [dataclasses.replace(s, tags=to_iob2(s.tags)) for s in raw[sp]] for sp in SPLITS}
    if cfg.keep_types is not None:
        found = set(entity_types(splits["train"]))
        missing = sorted(set(cfg.keep_types) - found)
        if missing:
            raise ConfigError(
                f"params datasets.{name}.keep_types: {missing} never occur in train; found {sorted(found)}"
            )
        kept = set(cfg.keep_types)
        splits = {sp: [dataclasses.replace(s, tags=keep_types(s.tags, kept)) for s in ss] for sp, ss in splits.items()}
    # 4. labels: declared, or the types of train; every type of dev/test must be one of them
    labels = list(cfg.labels) if cfg.labels is not None else entity_types(splits["train"])
    for sp in SPLITS if cfg.labels is not None else ("dev", "test"):
        for etype in entity_types(splits[sp]):
            if etype not in labels:
                why = f"not among the declared labels {labels}" if cfg.labels is not None else "never occurs in train"
                line = _first_tag_line(splits[sp], etype)
                raise DataFormatError(cfg.path(sp), line, f"entity type {etype!r} {why}")
    counts = {sp: ner_counts(ss) for sp, ss in splits.items()}
    return splits, {"scheme": scheme, "scheme_declared": cfg.scheme, "labels": labels, "counts": counts}


def ner_counts(sentences: list[NerSentence]) -> dict:
    """Counts in the shape of the data README's tables (entity counts per type from IOB2 spans)."""
    types = Counter(t for s in sentences for (t, _, _) in spans(s.tags))
    return {
        "sentences": len(sentences),
        "tokens": sum(len(s.tokens) for s in sentences),
        "documents": len({s.doc_id for s in sentences if s.doc_id is not None}),
        "entities": sum(types.values()),
        "entities_per_type": dict(sorted(types.items())),
    }


# 2. classification --------------------------------------------------------------------------------------


def prepare_classification(name: str, cfg: DatasetConfig) -> tuple[dict[str, list[Example]], dict]:
    splits = {sp: read_classification(cfg.path(sp), cfg.text_field, cfg.label_field) for sp in SPLITS}
    train_labels = sorted({e.label for e in splits["train"]})
    labels = list(cfg.labels) if cfg.labels is not None else train_labels
    for sp in SPLITS:
        for e in splits[sp]:
            if cfg.labels is not None and e.label not in labels:
                raise DataFormatError(cfg.path(sp), e.line, f"unknown label {e.label!r}; declared labels: {labels}")
            if e.label not in train_labels:  # the model could never learn it
                raise DataFormatError(cfg.path(sp), e.line, f"label {e.label!r} never occurs in train")
    counts = {
        sp: {"examples": len(ss), "per_label": dict(sorted(Counter(e.label for e in ss).items()))}
        for sp, ss in splits.items()
    }
    return splits, {"labels": labels, "counts": counts, "train_quality": train_quality(splits)}


def train_quality(splits: dict[str, list[Example]]) -> dict:
    """Repeated training rows (same text and label), conflicting ones (one text, several labels),
    and dev/test texts that also occur in train. Counted, not removed: the data is the user's."""
    labels_of: dict[str, list[str]] = defaultdict(list)
    for e in splits["train"]:
        labels_of[e.text].append(e.label)
    duplicates = sum(len(ls) - len(set(ls)) for ls in labels_of.values())
    conflicts = sum(len(set(ls)) > 1 for ls in labels_of.values())
    return {
        "train_duplicate_rows": duplicates,
        "train_conflicting_texts": conflicts,
        **{f"{sp}_texts_in_train": sum(e.text in labels_of for e in splits[sp]) for sp in ("dev", "test")},
    }


# 3. the stage ---------------------------------------------------------------------------------------------

PREPARE = {"ner": prepare_ner, "classification": prepare_classification}


def write_prepared(out: str | Path, rows: dict[str, list[dict]], meta: dict) -> None:
    """Publish a prepared dataset atomically: one JSONL file per split and ``dataset.json``."""
    with atomic_path(out) as tmp:
        tmp.mkdir()
        for split in SPLITS:
            write_jsonl(tmp / f"{split}.jsonl", rows[split])
        (tmp / META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def prepare_dataset(name: str, cfg: DatasetConfig) -> tuple[dict[str, list[dict]], dict]:
    """Rows per split (ready for JSON Lines) and the ``dataset.json`` metadata."""
    splits, info = PREPARE[cfg.task](name, cfg)
    sources = {sp: {"path": cfg.path(sp).as_posix(), "sha256": sha256_file(cfg.path(sp))} for sp in SPLITS}
    meta = {"name": name, "task": cfg.task, "splits": list(SPLITS), **info, "sources": sources}
    rows = {sp: [dataclasses.asdict(x) for x in ss] for sp, ss in splits.items()}
    return rows, meta
