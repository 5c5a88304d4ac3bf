"""Progress lines: in a log, one line per interval with docs/s and an ETA; on a terminal, redrawn."""

import io

from minisci.progress import Progress


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_log_gets_one_line_per_interval_and_a_final_line():
    out = io.StringIO()
    p = Progress("scan x", total=1000, unit="bytes", stream=out, log_interval=0.0)
    p.update(10, 250)
    p.update(20, 500)
    p.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and all(line.startswith("scan x: ") for line in lines)
    assert "25% of 1,000 bytes" in lines[0] and "docs/s" in lines[0] and "ETA " in lines[0]
    assert "100% of 1,000 bytes" in lines[-1] and "ETA 0:00" in lines[-1]


def test_log_is_quiet_between_intervals_and_terminal_redraws_in_place():
    out = io.StringIO()
    p = Progress("scan x", total=10, unit="rows", stream=out, log_interval=3600)
    p.update(1, 1)
    assert out.getvalue() == ""
    tty = Tty()
    p = Progress("scan x", total=10, unit="rows", stream=tty)
    p.close()
    assert tty.getvalue().startswith("\r\033[K") and tty.getvalue().endswith("\n")
