"""Copy generated tables into the README and docs/, so no result there is typed by hand.

    python -m minisci.report.sync_docs            # rewrite every marked block from its source
    python -m minisci.report.sync_docs --check    # exit 1 and name each block that differs

A Markdown file marks what it takes from a generated file (metrics/report.md, metrics/studies.md, ...)
with a pair of HTML comments, invisible when rendered:

    <!-- generated from metrics/report.md: table 1 -->
    ...copied text, replaced on every sync...
    <!-- end -->

The selector after the colon finds the text by what it is, never by line number, so a source that
gains columns, rows or sections is still copied correctly:

- ``table N``: the N-th Markdown table of the file (1 = the first);
- ``table N in "HEADING"``: the N-th table of the section whose heading starts with HEADING
  (a section runs to the next heading of the same or a higher level);
- ``section "HEADING"``: that section's whole body, without its heading line;
- ``cell "ROW" "COLUMN"``: one cell of the file's first table, in the row with a cell equal to ROW and
  the column whose header starts with COLUMN (for numbers quoted inside a sentence).

Relative links and images in copied text are rewritten to stay valid from the including file.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from minisci.errors import MinisciError

# The files whose blocks are kept in sync, relative to the repository root.
DOC_FILES = ("README.md", "docs/*.md", "benchmarks/README.md")

BLOCK = re.compile(
    r"(?P<open><!-- generated from (?P<source>[^:>]+?): (?P<selector>.+?) -->)(?P<body>.*?)(?P<close><!-- end -->)",
    re.S,
)
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"(\]\()(?P<target>[^)\s]+)(\))")


def _sections(lines: list[str], heading: str) -> list[str]:
    """The body lines of the first section whose heading text starts with ``heading``."""
    wanted = heading.lstrip("#").strip()
    for i, line in enumerate(lines):
        m = HEADING.match(line)
        if m and m.group(2).startswith(wanted):
            level = len(m.group(1))
            body = []
            for later in lines[i + 1 :]:
                n = HEADING.match(later)
                if n and len(n.group(1)) <= level:
                    break
                body.append(later)
            return body
    raise MinisciError(f"no heading starting with {wanted!r}")


def _tables(lines: list[str]) -> list[list[str]]:
    """Markdown tables: runs of lines starting with '|' whose second line is a separator."""
    tables, run = [], []
    for line in [*lines, ""]:
        if line.lstrip().startswith("|"):
            run.append(line.rstrip())
            continue
        if len(run) >= 2 and set(run[1].replace(" ", "")) <= set("|-:"):
            tables.append(run)
        run = []
    return tables


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]


def _nth_table(lines: list[str], n: int, where: str) -> list[str]:
    tables = _tables(lines)
    if not 1 <= n <= len(tables):
        raise MinisciError(f"{where} has {len(tables)} table(s), not a table {n}")
    return tables[n - 1]


def select(text: str, selector: str) -> str:
    """The part of a generated file that ``selector`` names (see the module docstring)."""
    lines = text.splitlines()
    m = re.fullmatch(r'table (\d+)(?: in "(.+)")?', selector)
    if m:
        where = f'section "{m.group(2)}"' if m.group(2) else "the file"
        scope = _sections(lines, m.group(2)) if m.group(2) else lines
        return "\n".join(_nth_table(scope, int(m.group(1)), where))
    m = re.fullmatch(r'section "(.+)"', selector)
    if m:
        return "\n".join(_sections(lines, m.group(1))).strip("\n")
    m = re.fullmatch(r'cell "(.+)" "(.+)"', selector)
    if m:
        table = _nth_table(lines, 1, "the file")
        header = _cells(table[0])
        cols = [i for i, h in enumerate(header) if h.startswith(m.group(2))]
        rows = [_cells(r) for r in table[2:] if m.group(1) in _cells(r)]
        if not cols or not rows:
            raise MinisciError(f"no row {m.group(1)!r} with a column {m.group(2)!r} in the first table")
        return rows[0][cols[0]]
    raise MinisciError(f'unknown selector {selector!r} (use: table N, table N in "HEADING", section, cell)')


def _rebase(text: str, source: Path, target: Path) -> str:
    """Rewrite relative links of text written for ``source`` so they resolve from ``target``."""

    def fix(m: re.Match) -> str:
        link = m.group("target")
        if re.match(r"^[a-z]+:|^#|^/", link):
            return m.group(0)
        path, _, anchor = link.partition("#")
        moved = os.path.relpath(os.path.normpath(source.parent / path), target.parent)
        return m.group(1) + Path(moved).as_posix() + (f"#{anchor}" if anchor else "") + m.group(3)

    return LINK.sub(fix, text)


def render(doc: Path, root: Path) -> str:
    """``doc``'s text with every marked block refilled from its source."""
    text = doc.read_text(encoding="utf-8")

    def fill(m: re.Match) -> str:
        source = root / m.group("source").strip()
        if not source.is_file():
            raise MinisciError(f"{doc.relative_to(root)}: generated block names a missing file {source.name!r}")
        try:
            part = select(source.read_text(encoding="utf-8"), m.group("selector").strip())
        except MinisciError as e:
            raise MinisciError(f"{doc.relative_to(root)}: {m.group('source').strip()}: {e}") from None
        part = _rebase(part, source.relative_to(root), doc.relative_to(root))
        inline = "\n" not in m.group("body")
        body = part if inline else f"\n{part}\n"
        return m.group("open") + body + m.group("close")

    return BLOCK.sub(fill, text)


def doc_files(root: Path) -> list[Path]:
    return sorted({p for pattern in DOC_FILES for p in root.glob(pattern) if p.is_file()})


def stale(root: Path) -> list[str]:
    """Files whose marked blocks differ from their sources."""
    return [str(p.relative_to(root)) for p in doc_files(root) if render(p, root) != p.read_text(encoding="utf-8")]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", default=".", help="repository root (default: the current directory)")
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block differs from its source")
    args = p.parse_args(argv)
    root = Path(args.root)
    try:
        changed = stale(root)
        if args.check:
            for name in changed:
                print(
                    f"error: {name}: generated blocks differ from their sources; run python -m minisci.report.sync_docs",
                    file=sys.stderr,
                )
            return 1 if changed else 0
        for name in changed:
            (root / name).write_text(render(root / name, root), encoding="utf-8")
            print(f"updated {name}")
    except MinisciError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
