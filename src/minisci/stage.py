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


def run_command(
    main: Callable[[list[str] | None], int | None],
    argv: list[str] | None = None,
    library_errors: tuple[type[BaseException], ...] = (),
) -> int:
    """The one wrapper of every command line (stages, ``minisci``, ``python -m minisci.report``, the
    benchmarks): call ``main``; a user-fixable error becomes ``error: <message>`` on stderr and exit
    code 1 (see :func:`describe`; ``library_errors``: further exception types reported as their type
    and first line); argparse's usage errors keep their exit code 2; Ctrl-C is ``error: interrupted``
    and exit code 130 (the shell's 128 + SIGINT), without a traceback. ``main``'s own exit code (an
    int) is returned, else 0."""
    try:
        code = main(argv)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        message = describe(e)
        if message is None and isinstance(e, library_errors):  # a library error with no file to name
            message = _one_line(f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}")
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        return 1
    return code if isinstance(code, int) else 0


def run_stage(main: Callable[[list[str] | None], None], argv: list[str] | None = None) -> int:
    """A pipeline stage (``stages/*.py``): :func:`run_command`, after clearing what killed writes of
    any stage left in the DVC project it runs in (:func:`minisci.io.sweep`, only where a ``dvc.yaml``
    is, as ``dvc repro`` runs stages). Other commands use :func:`run_command` and touch no file they
    do not write."""

    def stage(args: list[str] | None) -> None:
        from minisci.io import sweep

        if Path("dvc.yaml").is_file():
            sweep(Path.cwd())
        main(args)

    return run_command(stage, argv)
