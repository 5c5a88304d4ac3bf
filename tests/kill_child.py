"""Run a script and SIGKILL it right after its K-th filesystem operation (test helper).

Usage: python tests/kill_child.py K [--no-exchange] SCRIPT [ARGS...]

Counts renames, replaces, atomic exchanges, unlinks, rmdirs, mkdirs, file copies and text writes,
the operations through which :func:`minisci.io.atomic_path` and the stages change the disk. K = 0
never kills; the count of operations is then printed to stderr as ``ops=N``. ``--no-exchange``
makes ``renameat2(RENAME_EXCHANGE)`` unavailable, to test the move-aside fallback.
"""

from __future__ import annotations

import os
import runpy
import shutil
import signal
import sys
from pathlib import Path

import minisci.io as mio

_count = 0


def _tick() -> None:
    global _count
    _count += 1
    if _count == KILL_AT:
        os.kill(os.getpid(), signal.SIGKILL)


def _counted(fn):
    def wrapper(*args, **kwargs):
        result = fn(*args, **kwargs)
        _tick()
        return result

    return wrapper


if __name__ == "__main__":
    KILL_AT = int(sys.argv[1])
    args = sys.argv[2:]
    if args[0] == "--no-exchange":
        mio._exchange = lambda a, b: False
        args = args[1:]
    else:
        mio._exchange = _counted(mio._exchange)
    for name in ("rename", "replace", "unlink", "rmdir", "mkdir"):
        setattr(os, name, _counted(getattr(os, name)))
    shutil.copyfile = _counted(shutil.copyfile)
    Path.write_text = _counted(Path.write_text)
    sys.argv = args
    try:
        runpy.run_path(args[0], run_name="__main__")
    finally:
        print(f"ops={_count}", file=sys.stderr)
