"""What every stage script shares: turning user-fixable errors into one line and exit code 1."""

from __future__ import annotations

import sys
from collections.abc import Callable

from minisci.errors import MinisciError


def run_stage(main: Callable[[list[str] | None], None], argv: list[str] | None = None) -> int:
    """Call a stage's ``main``; a MinisciError becomes ``error: <file:line: message>`` on stderr."""
    try:
        main(argv)
    except MinisciError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0
