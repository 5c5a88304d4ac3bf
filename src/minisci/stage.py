"""What every stage script shares: turning user-fixable errors into one line on stderr and a
non-zero exit code, in one place instead of a ``try`` at each call site.

Exit codes: 1 for bad input, bad params or a fault the user can fix (a missing file, a full disk);
2 for bad command-line usage (argparse's own convention); 130 for Ctrl-C. Anything else is a bug and keeps its
traceback.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import yaml

from minisci.errors import MinisciError


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def describe(e: BaseException) -> str | None:
    """The one-line message for an error the user can fix, or None for a bug.

    Readers and loaders raise :class:`MinisciError` with the file and line themselves; the library
    exceptions below are the ones that can still escape from code that opens a known path (the
    ``OSError`` carries it) or decodes a document whose origin the message then cannot name.
    """
    if isinstance(e, MinisciError):
        return _one_line(e)
    if isinstance(e, OSError):
        where = f"{e.filename}: " if e.filename else ""
        return _one_line(f"{where}{e.strerror or e}")
    if isinstance(e, UnicodeDecodeError):
        return _one_line(f"input is not UTF-8: byte 0x{e.object[e.start]:02x} at byte offset {e.start}")
    if isinstance(e, json.JSONDecodeError):
        return _one_line(f"invalid JSON: {e.msg}: line {e.lineno} column {e.colno}")
    if isinstance(e, yaml.YAMLError):
        return _one_line(f"invalid YAML: {e}")
    return None


def description(doc: str | None) -> str:
    """A script's ``--help`` description: its docstring's first paragraph, joined into one line (the
    first line alone stops mid-sentence)."""
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def run_stage(main: Callable[[list[str] | None], None], argv: list[str] | None = None) -> int:
    """Call a stage's ``main``; a user-fixable error becomes ``error: <message>`` on stderr and
    exit code 1 (see :func:`describe`); argparse's usage errors keep their exit code 2; Ctrl-C is
    ``error: interrupted`` and exit code 130 (the shell's 128 + SIGINT), without a traceback.

    Run from a DVC project's root (as ``dvc repro`` runs stages), it first clears what killed
    writes of any earlier stage left behind (:func:`minisci.io.sweep`)."""
    from minisci.io import sweep

    try:
        if Path("dvc.yaml").is_file():
            sweep(Path.cwd())
        main(argv)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        message = describe(e)
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        return 1
    return 0
