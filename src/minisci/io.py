"""File helpers: atomic writes, JSON Lines, hashing. Every stage writes through these so that an
interrupted or failed stage never leaves a half-written output behind."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from minisci.errors import DataFormatError


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; move it into place only if the block succeeds.

    Works for files and directories. The temporary sits in the same directory so the final
    ``os.replace`` is atomic on one filesystem.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    target = tmp / path.name
    try:
        yield target
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        os.replace(target, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_json(path: str | Path, obj: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def write_jsonl(path: str | Path, rows: Iterable[dict]) -> int:
    """Write rows as JSON Lines (keys sorted, so equal rows give equal bytes); atomic."""
    n = 0
    with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
            n += 1
    return n


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict]]:
    """Yield ``(line_number, object)``; malformed lines raise with file and line."""
    path = Path(path)
    if not path.is_file():
        raise DataFormatError(path, None, "file not found")
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                raise DataFormatError(path, lineno, "empty line; expected one JSON object per line")
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataFormatError(path, lineno, f"invalid JSON ({e.msg} at column {e.colno})") from None
            if not isinstance(obj, dict):
                raise DataFormatError(path, lineno, f"expected a JSON object, got {type(obj).__name__}")
            yield lineno, obj


def read_jsonl(path: str | Path) -> list[dict]:
    rows = [obj for _, obj in iter_jsonl(path)]
    if not rows:
        raise DataFormatError(path, None, "file is empty; expected at least one JSON line")
    return rows
