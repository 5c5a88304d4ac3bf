"""Pretraining corpora as the ``corpora`` catalogue declares them, read in a stream.

A corpus is read in *chunks* of raw items (JSON lines as bytes, Arrow rows, text files), so the
costly part, parsing and checking each item and running the contamination guard on it, can happen
in worker processes while the reader moves on; and a reader holds one chunk, never the corpus.
:func:`parse_item` turns one raw item into a :class:`Record`, or raises :class:`DataFormatError`
naming the file, the line (JSON Lines) or row (Parquet, Arrow), and the field.

Why not ``datasets.load_dataset("json", ...)`` for JSON Lines and Parquet too: it first converts the
whole corpus into an Arrow copy on disk, and its errors name neither the line nor the field. A saved
Hugging Face dataset is already Arrow: it is memory-mapped and read in batches.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path

from minisci.config import CorpusConfig
from minisci.errors import DataFormatError

CHUNK_ITEMS = 256  # items per chunk: large enough to amortise a hand-off to a worker, small in memory
CHUNK_BYTES = 8 << 20  # and at most this much raw text per chunk (one larger item is a chunk alone), so
# the chunks in flight hold a bounded amount of text however long the documents are
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # a JSON escape of half of a UTF-16 surrogate pair
_SUFFIXES = {"jsonl": (".jsonl", ".jsonl.gz"), "parquet": (".parquet",), "txt": (".txt",)}


@dataclasses.dataclass(frozen=True)
class Record:
    """One document of a corpus, with the fields the catalogue entry named (or their defaults)."""

    id: str
    title: str
    text: str
    source: str
    kind: str
    flagged: bool  # the corpus builder's own overlap flag (flag_field), False without one


@dataclasses.dataclass(frozen=True)
class Chunk:
    """Consecutive raw items of one file: ``items[i]`` is at position ``first + i`` (line, row or file);
    ``done``: how far the reader had got after this chunk, in the unit of :func:`corpus_size`."""

    corpus: str
    file: int  # index into corpus_files(...)
    first: int
    items: list
    done: int = 0


# 1. files ---------------------------------------------------------------------------------------------


def corpus_files(cfg: CorpusConfig, root: Path = Path(".")) -> list[Path]:
    """The files of a corpus, in the order they are read (a saved HF dataset: its folder)."""
    where = root / cfg.location
    if cfg.format == "hf" or cfg.path is not None:
        if not where.exists():
            raise DataFormatError(where, None, "not found (check the corpora entry's path/dir, or run `dvc pull`)")
        if cfg.path is not None and where.is_dir():
            raise DataFormatError(where, None, "is a folder; declare it as dir, not path")
        return [where]
    if not where.is_dir():
        raise DataFormatError(where, None, "not a folder (check the corpora entry's dir, or run `dvc pull`)")
    files = sorted(
        p
        for p in where.rglob("*")
        if p.is_file()
        and p.name.endswith(_SUFFIXES[cfg.format])
        and not any(part.startswith(".") for part in p.relative_to(where).parts)  # hidden files and folders
    )
    if not files:
        raise DataFormatError(where, None, f"no {' or '.join(_SUFFIXES[cfg.format])} files in this folder")
    return files


def corpus_size(cfg: CorpusConfig, root: Path = Path(".")) -> tuple[int, str]:
    """How much there is to read, for progress and an ETA: bytes (JSON Lines), rows or files."""
    files = corpus_files(cfg, root)
    if cfg.format == "jsonl":
        return sum(f.stat().st_size for f in files), "bytes"
    if cfg.format == "parquet":
        return sum(_parquet_file(f).metadata.num_rows for f in files), "rows"
    if cfg.format == "hf":
        return len(_load_hf(files[0])), "rows"
    return len(files), "files"


def _load_hf(path: Path):
    import datasets

    try:
        ds = datasets.load_from_disk(str(path))
    except FileNotFoundError as e:
        raise DataFormatError(path, None, f"not a dataset saved with save_to_disk ({e})") from None
    except Exception as e:  # pyarrow's own error types for a damaged table
        raise DataFormatError(path, None, f"cannot be read ({' '.join(str(e).split())})") from None
    if isinstance(ds, datasets.DatasetDict):
        raise DataFormatError(path, None, f"holds splits {list(ds)}; point dir at one split's folder")
    return ds


# 2. raw chunks ----------------------------------------------------------------------------------------


class Tally:
    """How far a reader has got, in the unit of :func:`corpus_size` (for progress and an ETA)."""

    def __init__(self) -> None:
        self.done = 0


def iter_chunks(name: str, cfg: CorpusConfig, root: Path = Path("."), tally: Tally | None = None) -> Iterator[Chunk]:
    """The corpus as chunks of raw items, advancing ``tally``."""
    tally = tally or Tally()
    if cfg.format == "txt":
        yield from _txt_chunks(name, cfg, root, tally)
        return
    for k, path in enumerate(corpus_files(cfg, root)):
        if cfg.format == "jsonl":
            yield from _jsonl_chunks(name, k, path, tally)
        elif cfg.format == "parquet":
            yield from _arrow_chunks(name, k, tally, _parquet_batches(path, cfg))
        else:
            yield from _arrow_chunks(name, k, tally, _hf_batches(path, cfg))


def _jsonl_chunks(name: str, k: int, path: Path, tally: Tally) -> Iterator[Chunk]:
    base = tally.done
    with path.open("rb") as raw:
        f = gzip.open(raw) if path.name.endswith(".gz") else raw
        items, first, lineno, size = [], 1, 0, 0
        try:
            for lineno, line in enumerate(f, start=1):  # noqa: B007 - lineno is read after the loop
                items.append(line)
                size += len(line)
                if len(items) == CHUNK_ITEMS or size >= CHUNK_BYTES:
                    tally.done = base + raw.tell()  # compressed bytes for .gz: what corpus_size counts
                    yield Chunk(name, k, first, items, tally.done)
                    items, first, size = [], lineno + 1, 0
        except (OSError, EOFError, gzip.BadGzipFile) as e:  # a damaged gzip stream
            raise DataFormatError(path, lineno + 1, f"cannot be read ({e})") from None
        tally.done = base + path.stat().st_size
        if items:
            yield Chunk(name, k, first, items, tally.done)


def _parquet_file(path: Path):
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises its own error types for a file that is not Parquet
        raise DataFormatError(path, None, f"not a Parquet file ({' '.join(str(e).split())})") from None


def _arrow_errors(path: Path, batches):
    """``batches`` with pyarrow's errors on damaged data (a truncated file) as one line naming ``path``."""
    import pyarrow as pa

    try:
        yield from batches
    except (pa.ArrowException, OSError) as e:
        raise DataFormatError(path, None, f"cannot be read ({' '.join(str(e).split())})") from None


def _parquet_batches(path: Path, cfg: CorpusConfig):
    pf = _parquet_file(path)
    _check_columns(path, pf.schema_arrow.names, cfg)
    batches = pf.iter_batches(batch_size=CHUNK_ITEMS, columns=list(cfg.fields))
    yield from _arrow_errors(path, (batch.to_pylist() for batch in batches))


def _hf_batches(path: Path, cfg: CorpusConfig):
    ds = _load_hf(path)
    _check_columns(path, ds.column_names, cfg)
    ds = ds.select_columns(list(cfg.fields))

    def batches():
        for start in range(0, len(ds), CHUNK_ITEMS):
            batch = ds[start : start + CHUNK_ITEMS]  # a slice of the memory-mapped table
            yield [dict(zip(batch, values)) for values in zip(*batch.values())]

    yield from _arrow_errors(path, batches())


def _check_columns(path: Path, columns: list[str], cfg: CorpusConfig) -> None:
    missing = [f for f in cfg.fields if f not in columns]
    if missing:
        raise DataFormatError(path, None, f"no column {missing[0]!r} (declared in corpora); columns: {columns}")


def _arrow_chunks(name: str, k: int, tally: Tally, batches) -> Iterator[Chunk]:
    row = 1
    for batch in batches:
        for rows in _by_size(batch, lambda r: sum(len(v) for v in r.values() if isinstance(v, str))):
            tally.done += len(rows)
            yield Chunk(name, k, row, rows, tally.done)
            row += len(rows)


def _by_size(items: list, size) -> Iterator[list]:
    """``items`` in consecutive runs of at most CHUNK_BYTES (by ``size(item)``; a larger item alone)."""
    run, total = [], 0
    for item in items:
        n = size(item)
        if run and total + n > CHUNK_BYTES:
            yield run
            run, total = [], 0
        run.append(item)
        total += n
    if run:
        yield run


def _txt_chunks(name: str, cfg: CorpusConfig, root: Path, tally: Tally) -> Iterator[Chunk]:
    folder = root / cfg.location
    files = corpus_files(cfg, root)
    items, size, base = [], 0, tally.done
    for i, p in enumerate(files):
        items.append((p.relative_to(folder).as_posix(), p.read_bytes()))
        size += len(items[-1][1])
        if len(items) == CHUNK_ITEMS or size >= CHUNK_BYTES or i == len(files) - 1:
            tally.done = base + i + 1
            yield Chunk(name, 0, i + 2 - len(items), items, tally.done)
            items, size = [], 0


# 3. one item -> one record ----------------------------------------------------------------------------


def content_id(name: str, text: str) -> str:
    """The id of a document without one: its corpus and a hash of its whitespace-normalised text."""
    return f"{name}:{hashlib.sha256(' '.join(text.split()).encode()).hexdigest()[:20]}"


def parse_item(chunk: Chunk, i: int, cfg: CorpusConfig, path: Path) -> Record | None:
    """Item ``i`` of ``chunk`` as a record; None if the entry's filter drops it."""
    pos = chunk.first + i
    item = chunk.items[i]
    if cfg.format == "txt":
        rel, data = item
        where = path / rel
        try:
            text = data.decode("utf-8").removeprefix("\ufeff")  # a byte-order mark is not text
        except UnicodeDecodeError as e:
            raise DataFormatError(
                where, None, f"not UTF-8: byte 0x{data[e.start]:02x} at byte offset {e.start}"
            ) from None
        if not text.strip():
            raise DataFormatError(where, None, "empty document (a txt corpus has one document per file)")
        return Record(f"{chunk.corpus}:{rel}", "", text, chunk.corpus, "text", False)
    if cfg.format == "jsonl":
        obj = _json_object(item, path, pos)
        fail = _at(path, pos, line=True)
    else:
        obj, fail = item, _at(path, pos, line=False)
    for field, wanted in (cfg.filter or {}).items():
        if field not in obj:
            raise fail(f"missing field '{field}' (corpora filter)")
        if obj[field] not in (wanted if isinstance(wanted, list) else [wanted]):
            return None
    text = obj.get(cfg.text_field)
    if not isinstance(text, str) or not text.strip():
        got = "missing" if cfg.text_field not in obj else f"got {_kind(text)}"
        raise fail(f"field '{cfg.text_field}' (text_field) must be a non-empty string, {got}")
    return Record(
        _id(obj, cfg, chunk.corpus, text, fail),
        _optional_str(obj, cfg.title_field, "title_field", "", fail),
        text,
        _optional_str(obj, cfg.source_field, "source_field", chunk.corpus, fail, required=True),
        _optional_str(obj, cfg.kind_field, "kind_field", "text", fail, required=True),
        _flag(obj, cfg.flag_field, fail),
    )


def _json_object(line: bytes, path: Path, lineno: int) -> dict:
    if lineno == 1 and line.startswith(b"\xef\xbb\xbf"):
        raise DataFormatError(path, 1, "starts with a UTF-8 byte-order mark (BOM); save it as UTF-8 without BOM")
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataFormatError(
            path, lineno, f"not UTF-8: byte 0x{line[e.start]:02x} at byte {e.start} of the line"
        ) from None
    if not text.strip():
        raise DataFormatError(path, lineno, "empty line; expected one JSON object per line")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataFormatError(path, lineno, f"invalid JSON ({e.msg}: column {e.colno})") from None
    except (ValueError, RecursionError) as e:
        raise DataFormatError(path, lineno, f"invalid JSON ({str(e).splitlines()[0]})") from None
    if not isinstance(obj, dict):
        raise DataFormatError(path, lineno, f"expected a JSON object, got {type(obj).__name__}")
    if _SURROGATE_ESCAPE.search(text):  # half of a UTF-16 pair may stand alone, which no UTF-8 text holds
        try:
            json.dumps(obj, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as e:
            raise DataFormatError(
                path, lineno, f"an unpaired UTF-16 surrogate escape (\\u{ord(e.object[e.start]):04x}): not text"
            ) from None
    return obj


def _at(path: Path, pos: int, line: bool):
    """A function making the error for this item: ``file:line: msg`` or ``file: row N: msg``."""
    if line:
        return lambda msg: DataFormatError(path, pos, msg)
    return lambda msg: DataFormatError(path, None, f"row {pos}: {msg}")


def _kind(value) -> str:
    return "an empty string" if value == "" else type(value).__name__


def _id(obj: dict, cfg: CorpusConfig, corpus: str, text: str, fail) -> str:
    if cfg.id_field is None:
        return content_id(corpus, text)
    value = obj.get(cfg.id_field)
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        got = "missing" if cfg.id_field not in obj else f"got {_kind(value)}"
        raise fail(f"field '{cfg.id_field}' (id_field) must be a non-empty string or an integer, {got}")
    return str(value)


def _optional_str(obj: dict, field: str | None, key: str, default: str, fail, required: bool = False) -> str:
    if field is None:
        return default
    value = obj.get(field)
    if value is None and not required:  # a document without a title
        return default
    if not isinstance(value, str):
        got = "missing" if field not in obj else f"got {_kind(value)}"
        raise fail(f"field '{field}' ({key}) must be a string, {got}")
    return value


def _flag(obj: dict, field: str | None, fail) -> bool:
    if field is None:
        return False
    value = obj.get(field)
    if not isinstance(value, bool):
        got = "missing" if field not in obj else f"got {_kind(value)}"
        raise fail(f"field '{field}' (flag_field) must be true or false, {got}")
    return value


def check_first_records(corpora: dict[str, CorpusConfig], root: Path = Path(".")) -> None:
    """Parse the first item of every corpus (JSON Lines, Parquet, hf), so that a wrong field name or
    type in the last corpus of the catalogue fails at once, not after the others were read whole. A
    txt corpus has no fields to get wrong."""
    for name, cfg in corpora.items():
        if cfg.format == "txt":
            continue
        files = corpus_files(cfg, root)
        chunks = iter_chunks(name, cfg, root)
        try:
            chunk = next(chunks, None)
            if chunk is not None and chunk.items:
                parse_item(chunk, 0, cfg, files[chunk.file])
        finally:
            chunks.close()


def iter_records(
    name: str, cfg: CorpusConfig, root: Path = Path("."), tally: Tally | None = None
) -> Iterator[tuple[Chunk, int, Record]]:
    """Every record of a corpus in order, in this process (small corpora, tests, the second pass),
    advancing ``tally``."""
    files = corpus_files(cfg, root)
    for chunk in iter_chunks(name, cfg, root, tally):
        path = files[chunk.file] if cfg.format != "txt" else root / cfg.location
        for i in range(len(chunk.items)):
            record = parse_item(chunk, i, cfg, path)
            if record is not None:
                yield chunk, i, record
