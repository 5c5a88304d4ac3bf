"""File helpers: crash-safe writes, strict text and JSON Lines reading, hashing.

Every stage writes through :func:`atomic_path`, so an interrupted or failed stage never leaves a
half-written output behind, and reads text through :func:`read_text_lines` / :func:`iter_jsonl`, so
an undecodable byte or a malformed line is a one-line error naming the file and line.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from minisci.errors import DataFormatError, MinisciError

# Written into every directory output: the proof that a later run may replace the directory. A
# directory without it (a user's folder given as --out by mistake) is never deleted.
OUTPUT_MARKER = ".minisci-output"
_MARKER_TEXT = "Written by minisci; the next run replaces this whole directory.\n"
_BOM = b"\xef\xbb\xbf"


class OutputExistsError(MinisciError):
    """The output path holds something minisci did not write; refusing to replace it."""


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# Crash-safe outputs
# ---------------------------------------------------------------------------------------------


# A temporary of atomic_path: ``.NAME.<8 random characters>.tmp``, and the ``.old`` aside of the
# move-aside fallback, named after it. The writer holds an exclusive lock on a file inside its
# temporary for as long as it runs, so a temporary whose lock is free was left by a killed run; but
# only one last changed before this process started: a writer takes its lock just after creating the
# folder, and another process writing beside this one may be caught between the two. One left by a
# kill since this process started is cleared by the next run. Only a folder that holds the lock file
# (or an empty one: a writer killed before taking it) is a temporary: a user's file or folder that is
# merely named like one is never touched. The lock file goes last when a temporary is removed.
_TEMPORARY = re.compile(r"^\.(?P<name>.+)\.[A-Za-z0-9_]{8}\.(?P<kind>tmp|old)$")
_LOCK = ".minisci-writing"
_STARTED = time.time()  # this process's start, near enough (this module is imported early)


def _lock(tmp: Path):
    """Hold the temporary ``tmp`` as ours until the returned file is closed (or the process dies)."""
    f = open(tmp / _LOCK, "wb")  # noqa: SIM115 - closed by atomic_path
    try:
        import fcntl

        fcntl.flock(f, fcntl.LOCK_EX)  # a process probing it (_abandoned) holds it for an instant
    except ImportError:  # no flock (Windows): a live writer is then told apart by its folder's time
        pass
    return f


def _is_temporary(tmp: Path) -> bool:
    """Is ``tmp`` a folder atomic_path made: one holding the lock file, or an empty one?"""
    try:
        return tmp.is_dir() and not tmp.is_symlink() and ((tmp / _LOCK).is_file() or not any(tmp.iterdir()))
    except OSError:  # gone meanwhile, or unreadable: not ours to judge
        return False


def _abandoned(tmp: Path) -> bool:
    """Is ``tmp`` a temporary left by a run that no longer holds it (killed)? Not if it changed since
    this process started (see :data:`_TEMPORARY`), and never if it is not a temporary of ours."""
    if not _is_temporary(tmp):
        return False
    try:
        if tmp.stat().st_mtime >= _STARTED:
            return False
    except OSError:  # gone meanwhile: its writer finished
        return False
    try:
        import fcntl
    except ImportError:
        return True
    try:
        fd = os.open(tmp / _LOCK, os.O_RDONLY)
    except OSError:  # no lock file: an empty temporary, whose writer died before taking it
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # a live writer holds it
    finally:
        os.close(fd)
    return True


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _remove_temporary(tmp: Path) -> None:
    """Remove a temporary, its lock file last: a kill midway leaves a folder still known as ours."""
    with contextlib.suppress(OSError):
        for child in tmp.iterdir():
            if child.name != _LOCK:
                _remove(child)
    with contextlib.suppress(OSError):
        (tmp / _LOCK).unlink(missing_ok=True)
        tmp.rmdir()


def recover_dir(directory: str | Path, name: str | None = None) -> None:
    """Undo what killed :func:`atomic_path` writes left in ``directory``, for any output there (or
    for the output ``name`` only).

    A kill in the move-aside fallback, after the old output was moved aside but before the new one
    was moved in, leaves no output and an ``.old`` aside: the aside goes back (the old content
    wins). Every abandoned temporary is removed. Temporaries of a writer still running are left
    alone.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return
    found = [
        (m, directory / m.group(0))
        for m in map(_TEMPORARY.match, sorted(os.listdir(directory)))
        if m and name in (None, m["name"])
    ]
    for m, aside in found:
        if m["kind"] != "old" or not _abandoned(aside.with_suffix(".tmp")):
            continue
        output = directory / m["name"]
        if not os.path.lexists(output):
            os.rename(aside, output)
        else:
            _remove(aside)
    for m, tmp in found:
        if m["kind"] == "tmp" and _abandoned(tmp):
            _remove_temporary(tmp)


def recover(path: str | Path) -> None:
    """Undo what killed writes of ``path`` left beside it. Other outputs' temporaries there are left to
    the stage's :func:`sweep`: processes writing their own files into one folder at once (DDP ranks,
    seed workers) never meet each other's."""
    path = Path(path)
    recover_dir(path.parent, path.name)


def sweep(root: str | Path) -> None:
    """:func:`recover_dir` in every folder under ``root`` (hidden folders and links not followed):
    what any run does first, so a kill during one stage leaves no debris after the next run of any."""
    for directory, subdirs, _ in os.walk(root):
        recover_dir(directory)
        subdirs[:] = [d for d in subdirs if not d.startswith(".")]


def is_our_output(path: Path, owned: Callable[[Path], bool] | None = None) -> bool:
    """May :func:`atomic_path` replace the directory at ``path``? Only if it is empty, carries the
    marker, or ``owned`` recognises it (outputs written before the marker existed)."""
    if (path / OUTPUT_MARKER).is_file() or not any(path.iterdir()):
        return True
    return owned is not None and owned(path)


def foreign_files(path: Path, limit: int = 5) -> str:
    """The first ``limit`` files under ``path`` (and how many more), for a refusal to name what a
    replacement would delete."""
    files = sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if not p.is_dir())
    shown = ", ".join(files[:limit]) + (f" and {len(files) - limit} more" if len(files) > limit else "")
    return shown or "empty folders"


def check_replaceable(path: str | Path, new_is_dir: bool = True, owned: Callable[[Path], bool] | None = None) -> None:
    """Raise :class:`OutputExistsError` unless :func:`atomic_path` may replace ``path`` (see there)."""
    path = Path(path)
    if path.is_symlink():
        if new_is_dir:
            raise OutputExistsError(f"{path}: is a symbolic link; refusing to replace it with a directory")
        return  # a file output replaces the link itself, never its target
    if path.is_dir() and not is_our_output(path, owned):
        raise OutputExistsError(
            f"{path}: exists and is not an earlier minisci output (no {OUTPUT_MARKER} file); refusing to "
            f"delete what it holds ({foreign_files(path)}): remove it yourself or choose another output path"
        )
    if path.exists() and not path.is_dir() and new_is_dir:
        raise OutputExistsError(f"{path}: exists and is a file; refusing to replace it with a directory")


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one atomic step (Linux ``renameat2(RENAME_EXCHANGE)``); False where the
    system or the filesystem cannot."""
    if not sys.platform.startswith("linux"):
        return False
    fn = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if fn is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _swap_in(new: Path, path: Path, aside: Path) -> None:
    """Put ``new`` at ``path``. A kill at any instant leaves the old or the new content there, or
    (only without RENAME_EXCHANGE) an ``.old`` aside that :func:`recover` moves back."""
    if not os.path.lexists(path) or not (path.is_dir() or new.is_dir()) or path.is_symlink():
        os.replace(new, path)  # one atomic rename: nothing or a file/link is replaced
    elif _exchange(new, path):
        pass  # the old content now sits at ``new``, inside the temporary directory removed below
    else:
        os.rename(path, aside)
        try:
            os.rename(new, path)
        except BaseException:
            os.rename(aside, path)  # a failed (not killed) swap keeps the old output in place
            raise
        _remove(aside)


@contextlib.contextmanager
def atomic_path(path: str | Path, owned: Callable[[Path], bool] | None = None) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; move it into place only if the block succeeds.

    Works for files and directories; a directory output gets an :data:`OUTPUT_MARKER` file, and an
    existing directory is replaced only if it has one, is empty, or ``owned(path)`` says it is an
    earlier output of ours (for outputs written before the marker existed). Anything else at
    ``path`` raises :class:`OutputExistsError` before the block runs, so nothing is computed for
    nothing and nothing of the user's is deleted. Temporaries left by a killed run are cleaned up
    first (:func:`recover`). The temporary sits in the same directory so the swap is a rename on
    one filesystem. Not for two processes writing the same output at once (DVC locks the repo).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    recover(path)
    if os.path.lexists(path):
        check_replaceable(path, new_is_dir=path.is_dir(), owned=owned)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    target = tmp / path.name
    lock = _lock(tmp)
    try:
        yield target
        if target.is_dir():
            (target / OUTPUT_MARKER).write_text(_MARKER_TEXT, encoding="utf-8")
        if os.path.lexists(path):  # the block may have produced a directory where a file was
            check_replaceable(path, new_is_dir=target.is_dir(), owned=owned)
        _swap_in(target, path, tmp.with_suffix(".old"))
    finally:
        _remove_temporary(tmp)
        lock.close()


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


# ---------------------------------------------------------------------------------------------
# Strict reading
# ---------------------------------------------------------------------------------------------


def _open_input(path: Path):
    if path.is_dir():
        raise DataFormatError(path, None, "is a directory; expected a file")
    if not path.is_file():
        raise DataFormatError(path, None, "file not found")
    return path.open("rb")


def read_text_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, line)`` of a UTF-8 text file, without the line ending (``\\n`` or
    ``\\r\\n``; a lone ``\\r`` is not a line break).

    A byte-order mark or a byte that is not UTF-8 raises :class:`DataFormatError` with the line
    and the byte offset in the file, instead of a ``UnicodeDecodeError`` that names neither.
    """
    path = Path(path)
    with _open_input(path) as f:
        offset = 0
        for lineno, raw in enumerate(f, start=1):
            if lineno == 1 and raw.startswith(_BOM):
                raise DataFormatError(
                    path, 1, "starts with a UTF-8 byte-order mark (BOM); save it as UTF-8 without BOM"
                )
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataFormatError(
                    path, lineno, f"not UTF-8: byte 0x{raw[e.start]:02x} at byte offset {offset + e.start}"
                ) from None
            offset += len(raw)
            yield lineno, line.removesuffix("\n").removesuffix("\r")


def read_text(path: str | Path) -> str:
    """The whole of a UTF-8 text file, with the same checks as :func:`read_text_lines`; lines end
    with ``\\n``."""
    return "".join(line + "\n" for _, line in read_text_lines(path))


def iter_jsonl(path: str | Path, object_pairs_hook: Callable | None = None) -> Iterator[tuple[int, dict]]:
    """Yield ``(line_number, object)``; bad bytes and malformed lines raise with file and line.
    ``object_pairs_hook`` is passed to :func:`json.loads` (to see duplicate keys)."""
    path = Path(path)
    for lineno, line in read_text_lines(path):
        if not line.strip():
            raise DataFormatError(path, lineno, "empty line; expected one JSON object per line")
        try:
            obj = json.loads(line, object_pairs_hook=object_pairs_hook)
        except json.JSONDecodeError as e:
            raise DataFormatError(path, lineno, f"invalid JSON ({e.msg}: column {e.colno})") from None
        except (ValueError, RecursionError) as e:  # a 5000-digit number, 100k nested brackets
            raise DataFormatError(path, lineno, f"invalid JSON ({str(e).splitlines()[0]})") from None
        if not isinstance(obj, dict):
            raise DataFormatError(path, lineno, f"expected a JSON object, got {type(obj).__name__}")
        yield lineno, obj


def read_jsonl(path: str | Path) -> list[dict]:
    rows = [obj for _, obj in iter_jsonl(path)]
    if not rows:
        raise DataFormatError(path, None, "file is empty; expected at least one JSON line")
    return rows
