"""The ``fetch_data`` stage: copy every dataset file listed in the project manifest from a local
mirror, verify its size and sha256, and publish the whole tree atomically so that a failure or a kill
leaves no partial output (a rerun cleans up and starts over). Nothing is downloaded: the stages run
offline (cluster nodes often are), and a file missing from the mirror is an error that says where the
manifest's ``url`` column publishes it."""

from __future__ import annotations

import csv
import dataclasses
import re
import shutil
from pathlib import Path

from minisci.errors import FetchError
from minisci.io import atomic_path, read_text_lines, sha256_file

MANIFEST_COLUMNS = ("path", "bytes", "sha256", "url")
# Either case: sha256sum prints lower case, some tools and hand-copied digests upper case.
_SHA256_RE = re.compile(r"^[0-9a-fA-F]{64}$")
RAW_URL = "https://raw.githubusercontent.com/{repo}/{commit}/{path}"


@dataclasses.dataclass(frozen=True)
class ManifestEntry:
    path: str  # relative to the data root, e.g. ner/bc5cdr/train.txt
    bytes: int
    sha256: str
    url: str  # empty when the file has no single public source (derived or rebuilt files)


def url_for(row: dict[str, str]) -> str:
    """Public URL of a file in the shared MANIFEST.tsv, or '' when it was derived from several
    sources or rebuilt (then only a mirror can provide it)."""
    repo, path, commit = row["source_repo"], row["source_path"], row["source_commit"]
    note = row.get("license_note", "")
    if ";" in repo or ";" in path or note.startswith(("DERIVED", "RECONSTRUCTED")):
        return ""
    return RAW_URL.format(repo=repo.strip(), commit=commit.strip(), path=path.strip())


def manifest_from_shared(shared_manifest: str | Path) -> list[ManifestEntry]:
    """Derive the project manifest from the data mirror's MANIFEST.tsv."""
    with open(shared_manifest, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    return sorted(
        (ManifestEntry(r["path"], int(r["bytes"]), r["sha256"], url_for(r)) for r in rows),
        key=lambda e: e.path,
    )


def write_manifest(entries: list[ManifestEntry], path: str | Path) -> None:
    with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerow(MANIFEST_COLUMNS)
        for e in entries:
            w.writerow([e.path, e.bytes, e.sha256, e.url])


def read_manifest(path: str | Path, warnings: list[str] | None = None) -> list[ManifestEntry]:
    """The manifest's entries. A path listed twice with the same size and checksum is fetched once
    and adds a line to ``warnings``; listed twice with different ones, it is an error."""
    path = Path(path)
    if not path.is_file():
        raise FetchError(f"{path}: manifest not found" + (" (it is a directory)" if path.is_dir() else ""))
    entries = []
    first_line: dict[str, tuple[int, ManifestEntry]] = {}
    for lineno, line in read_text_lines(path):  # undecodable bytes: DataFormatError with line and offset
        row = next(csv.reader([line], delimiter="\t"), [])  # csv: the quoting write_manifest may use
        if lineno == 1:
            if tuple(row) != MANIFEST_COLUMNS:
                raise FetchError(f"{path}:1: expected header {list(MANIFEST_COLUMNS)}, got {row!r}")
            continue
        if len(row) != len(MANIFEST_COLUMNS) or not row[1].isdigit() or not _SHA256_RE.match(row[2]):
            raise FetchError(f"{path}:{lineno}: expected path<TAB>bytes<TAB>sha256<TAB>url, got {row!r}")
        if not row[0] or Path(row[0]).is_absolute() or ".." in Path(row[0]).parts:
            raise FetchError(f"{path}:{lineno}: path must be relative and inside the data root: {row[0]!r}")
        entry = ManifestEntry(row[0], int(row[1]), row[2].lower(), row[3])  # compared with sha256_file's
        if entry.path in first_line:
            first, earlier = first_line[entry.path]
            if (earlier.bytes, earlier.sha256) != (entry.bytes, entry.sha256):
                raise FetchError(f"{path}:{lineno}: {entry.path} is listed on line {first} with another size or sha256")
            if warnings is not None:
                warnings.append(f"{path}:{lineno}: {entry.path} is listed again (first on line {first}); fetched once")
            continue
        first_line[entry.path] = (lineno, entry)
        entries.append(entry)
    if not entries:
        raise FetchError(f"{path}: manifest lists no files")
    return entries


def fetch_one(entry: ManifestEntry, mirror: Path | None, dest: Path) -> None:
    """Copy one file from the mirror to ``dest`` and verify its size and sha256."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    local = mirror / entry.path if mirror is not None else None
    if local is None or not local.is_file():
        where = f"not in mirror {mirror}" if mirror is not None else "no mirror configured"
        published = f"; it is published at {entry.url}" if entry.url else ""
        raise FetchError(f"{entry.path}: {where} (minisci reads data only from a local mirror{published})")
    shutil.copyfile(local, dest)
    source = f"mirror {local}"
    size = dest.stat().st_size
    if size != entry.bytes:
        raise FetchError(f"{entry.path}: size mismatch (from {source}): manifest says {entry.bytes} bytes, got {size}")
    digest = sha256_file(dest)
    if digest != entry.sha256:
        raise FetchError(f"{entry.path}: sha256 mismatch (from {source}): expected {entry.sha256}, got {digest}")


def check_mirror(mirror: str | Path | None, option: str = "fetch_data.mirror") -> Path | None:
    """The mirror directory, or None when none is configured. A mirror that is configured but
    missing is an error naming ``option``: silently going to the network instead would fail later
    with a misleading "no mirror configured" for the first file."""
    if not mirror:
        return None
    mirror = Path(mirror)
    if not mirror.exists():
        raise FetchError(f"{option}: mirror directory {mirror} does not exist")
    if not mirror.is_dir():
        raise FetchError(f"{option}: mirror {mirror} is not a directory")
    return mirror


def fetch_all(
    entries: list[ManifestEntry], mirror: str | Path | None, out_dir: str | Path, option: str = "fetch_data.mirror"
) -> dict:
    """Fetch every entry into ``out_dir``; the directory appears only if every file has its
    manifest size and sha256. ``option`` names where ``mirror`` came from, for error messages."""
    mirror = check_mirror(mirror, option)
    with atomic_path(out_dir) as tmp:
        for e in entries:
            fetch_one(e, mirror, tmp / e.path)
    return {"files": len(entries), "bytes": sum(e.bytes for e in entries)}
