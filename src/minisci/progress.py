"""Progress of a long pass over data: items per second and an ETA.

On a terminal the line is redrawn in place about once a second; in a log (DVC's captured output,
a file) one line is printed per ``log_interval`` seconds, so a log shows the pace without a flood.
"""

from __future__ import annotations

import sys
import time


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return (
        f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        if seconds >= 3600
        else f"{seconds // 60}:{seconds % 60:02d}"
    )


class Progress:
    """``update(items, done)``: ``items`` counted so far (documents), ``done`` of ``total`` read so far
    (bytes, rows or files; the ETA assumes the rest reads at the same pace)."""

    def __init__(self, label: str, total: int, unit: str, stream=None, log_interval: float = 30.0):
        self.label, self.total, self.unit = label, max(total, 1), unit
        self.stream = stream or sys.stdout
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.interval = 1.0 if self.tty else log_interval
        self.start = self.last = time.perf_counter()
        self.items = self.done = 0

    def line(self) -> str:
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        frac = min(self.done / self.total, 1.0)
        eta = elapsed * (1 - frac) / frac if frac > 0 else float("nan")
        eta_text = _duration(eta) if eta == eta else "?"
        return (
            f"{self.label}: {self.items:,} docs, {self.items / elapsed:,.0f} docs/s, "
            f"{frac:.0%} of {self.total:,} {self.unit}, elapsed {_duration(elapsed)}, ETA {eta_text}"
        )

    def update(self, items: int, done: int) -> None:
        self.items, self.done = items, done
        now = time.perf_counter()
        if now - self.last >= self.interval:
            self.last = now
            self._emit(final=False)

    def close(self) -> None:
        self.done = self.total
        self._emit(final=True)

    def _emit(self, final: bool) -> None:
        if self.tty:
            self.stream.write("\r\033[K" + self.line() + ("\n" if final else ""))
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()
