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
import os
import re
import time
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
from minisci.tasks import facts

LARGE_FILE = 64 << 20  # a split file at least this large is announced before it is read, and timed


def read_split(name: str, cfg: DatasetConfig, sp: str, read):
    """``read(path)`` of one split file; a large one is said before and after, since reading and
    checking it takes a while and shows no other progress."""
    path = cfg.path(sp)
    size = path.stat().st_size
    if size < LARGE_FILE:
        return read(path)
    print(f"prepare_data {name}: reading {path} ({size / 2**20:,.0f} MiB)", flush=True)
    start = time.perf_counter()
    rows = read(path)
    print(f"prepare_data {name}: {path}: {len(rows):,} rows in {time.perf_counter() - start:,.1f} s", flush=True)
    return rows


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


def _check_has_entities(cfg: DatasetConfig, splits: dict[str, list[NerSentence]], why: str) -> None:
    """A split without a single entity trains or scores nothing: most likely the wrong column."""
    for sp in SPLITS:
        if not entity_types(splits[sp]):
            raise DataFormatError(cfg.path(sp), None, f"no entity in this split: {why}")


def prepare_ner(name: str, cfg: DatasetConfig) -> tuple[dict[str, list[NerSentence]], dict]:
    # 1. read as written; 2. the tag scheme; 3. IOB2 with the same spans, then the kept types
    raw = {sp: read_split(name, cfg, sp, lambda path: read_conll(path, cfg.tag_column)) for sp in SPLITS}
    _check_has_entities(cfg, raw, f"every tag in column {cfg.tag_column} (tag_column) is O; is tag_column right?")
    scheme = _ner_scheme(cfg, raw)
    splits = {sp: [dataclasses.replace(s, tags=to_iob2(s.tags)) for s in raw[sp]] for sp in SPLITS}
    if cfg.keep_types is not None:
        found = set(entity_types(splits["train"]))
        missing = sorted(set(cfg.keep_types) - found)
        if missing:
            raise ConfigError(
                f"datasets.{name}.keep_types (the dataset catalogue): {missing} never occur in train; found {sorted(found)}"
            )
        kept = set(cfg.keep_types)
        splits = {sp: [dataclasses.replace(s, tags=keep_types(s.tags, kept)) for s in ss] for sp, ss in splits.items()}
        _check_has_entities(cfg, splits, f"none of keep_types {list(cfg.keep_types)} occurs in it")
    # 4. labels: declared, or the types of train; every type of dev/test must be one of them
    in_train = entity_types(splits["train"])
    labels = list(cfg.labels) if cfg.labels is not None else in_train
    for sp in SPLITS if cfg.labels is not None else ("dev", "test"):
        for etype in entity_types(splits[sp]):
            if etype not in labels or etype not in in_train:  # a type train lacks: the model could never learn it
                declared = cfg.labels is not None and etype not in labels
                why = f"not among the declared labels {labels}" if declared else "never occurs in train"
                line = _first_tag_line(splits[sp], etype)
                raise DataFormatError(cfg.path(sp), line, f"entity type {etype!r} {why}")
    counts = {sp: ner_counts(ss) for sp, ss in splits.items()}
    keyed = {sp: [Example(" ".join(s.tokens), " ".join(s.tags), s.line) for s in ss] for sp, ss in splits.items()}
    health = {
        "train_quality": train_quality(keyed),
        "missing_labels": {sp: [t for t in labels if t not in counts[sp]["entities_per_type"]] for sp in SPLITS},
        "singleton_types": _singleton_types(cfg, splits),
    }
    return splits, {"scheme": scheme, "scheme_declared": cfg.scheme, "labels": labels, "counts": counts, **health}


def _singleton_types(cfg: DatasetConfig, splits: dict[str, list[NerSentence]]) -> dict[str, str]:
    """Entity types with one mention in the whole dataset (a likely typo), each with its place."""
    mentions = Counter(t for ss in splits.values() for s in ss for (t, _, _) in spans(s.tags))
    return {
        t: f"{cfg.path(sp)}:{_first_tag_line(splits[sp], t)}"
        for t in sorted(t for t, n in mentions.items() if n == 1)
        for sp in SPLITS
        if t in entity_types(splits[sp])
    }


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


_CONLL_LINE = re.compile(r"^\S+(?:[ \t]+\S+)*[ \t]+(?:O|[BIES]-\S+)\s*$")  # tokens, then a tag last


def _read_jsonl(path: Path, cfg: DatasetConfig, json_warnings: list[str]) -> list[Example]:
    """``read_classification``; a file that is not JSON but reads as CoNLL says so."""
    try:
        return read_classification(path, cfg.text_field, cfg.label_field, json_warnings)
    except DataFormatError as e:
        if e.line is None or "invalid JSON" not in str(e):
            raise
        with path.open(encoding="utf-8", errors="replace") as f:
            line = next((x for k, x in enumerate(f, start=1) if k == e.line), "")
        if not _CONLL_LINE.match(line):
            raise
        raise DataFormatError(
            path, e.line, f"{str(e).split(': ', 1)[1]}; the line is a token and its tag: it looks like CoNLL "
            "(declare format: conll, task: ner)",
        ) from None  # fmt: skip


def prepare_classification(name: str, cfg: DatasetConfig) -> tuple[dict[str, list[Example]], dict]:
    json_warnings: list[str] = []
    splits = {sp: read_split(name, cfg, sp, lambda path: _read_jsonl(path, cfg, json_warnings)) for sp in SPLITS}
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
    health = {
        "train_quality": train_quality(splits),
        "missing_labels": {sp: [c for c in labels if c not in counts[sp]["per_label"]] for sp in SPLITS},
        "duplicate_json_keys": json_warnings,
    }
    return splits, {"labels": labels, "counts": counts, **health}


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

PREPARE = {"conll": prepare_ner, "jsonl": prepare_classification}  # by the catalogue entry's file format


def write_prepared(out: str | Path, rows: dict[str, list[dict]], meta: dict) -> None:
    """Publish a prepared dataset atomically: one JSONL file per split and ``dataset.json``."""
    with atomic_path(out) as tmp:
        tmp.mkdir()
        for split in SPLITS:
            write_jsonl(tmp / f"{split}.jsonl", rows[split])
        (tmp / META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def check_split_files(cfg: DatasetConfig) -> None:
    """A declared split file that is not there: name the files that are (a wrong split name or
    extension is the usual cause)."""
    for sp in SPLITS:
        path = cfg.path(sp)
        if path.is_file() or path.is_dir():
            continue  # a directory is reported by the reader
        folder = path.parent
        if not folder.is_dir():
            raise DataFormatError(path, None, f"file not found, and its folder {folder} does not exist")
        present = sorted(p.name for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
        raise DataFormatError(
            path, None, f"file not found; {folder} holds: {', '.join(present) if present else 'no files'}"
        )


def check_links_stay_inside(cfg: DatasetConfig, root: str | Path) -> None:
    """Refuse a split file inside the repository ``root`` that is a link to a file outside it: DVC
    versions the link, not the data, like a ``dir`` outside the repository
    (:func:`minisci.config.is_inside_repository`). A link into a DVC cache (``dvc add`` with
    symlinked checkouts; DVC 3 keeps its files under ``files/md5/``) is versioned, and allowed."""
    lexical, real = Path(os.path.abspath(root)), Path(root).resolve()
    for sp in SPLITS:
        path = Path(os.path.abspath(lexical / cfg.path(sp)))
        target = path.resolve()
        if path.is_relative_to(lexical) and not target.is_relative_to(real) and "/files/md5/" not in target.as_posix():
            raise DataFormatError(
                cfg.path(sp),
                None,
                f"is a link to {target}, outside the repository, where DVC does not version it: "
                "bring the data in with 'dvc add' or 'dvc import-url'",
            )


def health_warnings(meta: dict) -> list[str]:
    """One line per finding a user should see before training: classes or entity types missing
    from a split, duplicate JSON keys, entity types seen only once."""
    kind = facts.get(meta["task"]).label_word
    out = [
        f"{kind} {label!r} never occurs in {sp} ({meta['sources'][sp]['path']}); "
        + ("the model cannot learn it" if sp == "train" else f"its {sp} F1 is undefined")
        for sp, missing in meta["missing_labels"].items()
        for label in missing
    ]
    out += meta.get("duplicate_json_keys", [])
    out += [
        f"{where}: entity type {t!r} occurs only once in the whole dataset (a typo?)"
        for t, where in meta.get("singleton_types", {}).items()
    ]
    return out


def quality_lines(meta: dict) -> list[str]:
    """One line per kind of repeated or leaked text in ``train_quality``: counted in ``dataset.json``
    and the report, and printed by the stage beside :func:`health_warnings`."""
    q, src = meta.get("train_quality", {}), {sp: meta["sources"][sp]["path"] for sp in SPLITS}
    what = {
        "train_duplicate_rows": ("repeated training rows (same text and label)", f"in {src['train']}"),
        "train_conflicting_texts": ("training texts with more than one label", f"in {src['train']}"),
        "dev_texts_in_train": ("dev texts also in train", f"in {src['dev']}; dev scores may be inflated"),
        "test_texts_in_train": ("test texts also in train", f"in {src['test']}; test scores may be inflated"),
    }
    return [f"{what_}: {q[key]}, {where}" for key, (what_, where) in what.items() if q.get(key)]


def prepare_dataset(name: str, cfg: DatasetConfig) -> tuple[dict[str, list[dict]], dict]:
    """Rows per split (ready for JSON Lines) and the ``dataset.json`` metadata, which also records
    the dataset's health: ``counts`` (sizes per split), ``train_quality`` (duplicate and conflicting
    training rows, dev/test texts found in train), ``missing_labels`` (per split), and ``warnings``
    (every line :func:`health_warnings` prints) with ``warning_counts``."""
    check_split_files(cfg)
    splits, info = PREPARE[cfg.format](name, cfg)
    sources = {sp: {"path": cfg.path(sp).as_posix(), "sha256": sha256_file(cfg.path(sp))} for sp in SPLITS}
    meta = {"name": name, "task": cfg.task, "splits": list(SPLITS), **info, "sources": sources}
    meta["warnings"] = health_warnings(meta)
    meta["warning_counts"] = {
        "missing_labels": sum(len(v) for v in meta["missing_labels"].values()),
        "duplicate_json_keys": len(meta.get("duplicate_json_keys", [])),
        "singleton_types": len(meta.get("singleton_types", {})),
    }
    rows = {sp: [dataclasses.asdict(x) for x in ss] for sp, ss in splits.items()}
    return rows, meta
