"""Progress of long work (training and scoring), the same way in every stage.

On a terminal: a tqdm bar with the total, the rate and the time left. In a log file (``dvc repro``
or ``dvc queue`` output, CI): one plain line per logging interval, its numbers printed as numbers
(``loss 0.4321``, not transformers' ``{'loss': '0.4321'}``), with the step, the total and the time
left. Training reports through :class:`minisci.trainer_progress.StageProgress` (a Trainer callback,
in its own module so that stages that do not train never import transformers).

Scoring (batches of a model's forward passes, or windows that an encoding callback reports, over one
or several calls) uses :class:`WorkProgress` (:func:`scoring` wraps a sequence of batches in it). Long
passes over data that are not training (``sample_corpus`` reading a corpus) use :class:`Progress`:
items per second and an ETA, redrawn on a terminal, one line per interval in a log.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Sequence

LOG_EVERY_SECONDS = 30.0  # scoring in a log: a line at most this often; shorter work prints none


def on_terminal() -> bool:
    return sys.stderr.isatty()


def duration(seconds: float) -> str:
    """``1:02:03`` or ``4:05``, as tqdm writes times."""
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def number(value: float | int) -> str:
    return str(value) if isinstance(value, int) else f"{value:.4g}"


def progress_line(
    what: str, done: int, total: int, elapsed: float, since: int = 0, numbers: dict | None = None, unit: str = ""
) -> str:
    """One plain line: where the work is, its numbers, the time spent and the time left (estimated
    from the steps done by this process, ``done - since``: a resumed run does not count the steps it
    skipped)."""
    unit = f" {unit}" if unit else ""
    parts = [f"{what}: {done}/{total}{unit} ({done / total:.0%})" if total else f"{what}: {done}{unit}"]
    parts += [f"{k} {number(v)}" for k, v in (numbers or {}).items()]
    left = elapsed / (done - since) * (total - done) if total and since < done < total else None
    times = f"{duration(elapsed)} elapsed" + (f", about {duration(left)} left" if left is not None else "")
    return ", ".join(parts) + "; " + times


class WorkProgress:
    """Progress of ``total`` units of work (batches, windows), reported by calling it with the units
    just done, over one or several passes: on a terminal a bar (the total, the rate, the time left)
    that disappears when done; in a log a plain line at most every ``every`` seconds and one when the
    work is done, and nothing for work shorter than ``every``."""

    def __init__(
        self, what: str, total: int, unit: str, terminal: bool | None = None, every: float = LOG_EVERY_SECONDS
    ):
        self.what, self.total, self.unit, self.every = what, total, unit, every
        self.done, self.start = 0, time.monotonic()
        self.last = self.start
        self.bar = None
        if on_terminal() if terminal is None else terminal:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=what, unit=unit, leave=False, dynamic_ncols=True, file=sys.stderr)

    def __call__(self, units: int) -> None:
        self.done += units
        finished = self.done >= self.total
        if self.bar is not None:
            self.bar.update(units)
            if finished:
                self.bar.close()
            return
        now = time.monotonic()
        if now - self.last >= self.every or (finished and now - self.start >= self.every):
            self.last = now
            print(progress_line(self.what, self.done, self.total, now - self.start, unit=self.unit), flush=True)


def scoring(batches: Sequence, what: str, terminal: bool | None = None, every: float = LOG_EVERY_SECONDS) -> Iterator:
    """``batches``, with a :class:`WorkProgress` counting them."""
    progress = WorkProgress(what, len(batches), "batches", terminal, every)
    for batch in batches:
        yield batch
        progress(1)


class Progress:
    """``update(items, done)``: ``items`` counted so far (documents), ``done`` of ``total`` read so far
    (bytes, rows or files; the ETA assumes the rest reads at the same pace)."""

    def __init__(self, label: str, total: int, unit: str, stream=None, log_interval: float = 30.0):
        self.label, self.total, self.unit = label, total, unit
        self.stream = stream or sys.stdout
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.interval = 1.0 if self.tty else log_interval
        self.start = self.last = time.perf_counter()
        self.items = self.done = 0

    def line(self) -> str:
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        frac = min(self.done / self.total, 1.0) if self.total else 1.0  # an empty file is read whole at once
        eta = elapsed * (1 - frac) / frac if frac > 0 else float("nan")
        eta_text = duration(eta) if eta == eta else "?"
        return (
            f"{self.label}: {self.items:,} docs, {self.items / elapsed:,.0f} docs/s, "
            f"{frac:.0%} of {self.total:,} {self.unit}, elapsed {duration(elapsed)}, ETA {eta_text}"
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
