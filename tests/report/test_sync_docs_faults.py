"""sync_docs on broken input: every case is one line on stderr, exit 1, for a plain sync and for
--check alike, and the file is left byte for byte as it was (a sync must never delete text)."""

import pytest

from minisci.report import sync_docs

REPORT = """# Report

| task | dataset | difference | verdict |
|---|---|---|---|
| NER | bc5cdr | +0.02 | equivalent |

## Power

| dataset | n |
|---|---|
| bc5cdr | 500 |
"""
EM_DASH = REPORT.replace("|---|---|---|---|", "|---|—|---|---|")
RAGGED = REPORT.replace("| NER | bc5cdr | +0.02 | equivalent |", "| NER | bc5cdr |")

BLOCK = "<!-- generated from metrics/report.md: table 1 -->\nold\n<!-- end -->\n"
CELL = 'F1 <!-- generated from metrics/report.md: cell "bc5cdr" "difference" -->x<!-- end -->\n'

CASES = {
    "end missing before a hand-written paragraph": (
        REPORT,
        "# T\n\n<!-- generated from metrics/report.md: table 1 -->\nold\n\nA hand-written paragraph.\n\n" + BLOCK,
        "error: README.md:3: <!-- generated from metrics/report.md: table 1 --> has no <!-- end --> "
        "before the next marker (line 8)",
    ),
    "end missing everywhere": (
        REPORT,
        "# T\n<!-- generated from metrics/report.md: table 1 -->\nstale\n",
        "error: README.md:2: <!-- generated from metrics/report.md: table 1 --> has no <!-- end -->",
    ),
    "an end without its opening": (
        REPORT,
        BLOCK + "text\n<!-- end -->\n",
        "error: README.md:5: <!-- end --> closes no '<!-- generated ... -->' marker",
    ),
    "an opening marker without a selector": (
        REPORT,
        "<!-- generated from metrics/report.md -->\nold\n<!-- end -->\n",
        "error: README.md:1: expected '<!-- generated from FILE: SELECTOR -->', "
        "got <!-- generated from metrics/report.md -->",
    ),
    "a separator row typed with an em dash": (
        EM_DASH,
        BLOCK,
        "error: README.md: metrics/report.md:4: table separator row '|---|—|---|---|' holds '—'; "
        "write it with '-' only",
    ),
    "a ragged row under the header a cell reads": (
        RAGGED,
        CELL,
        "error: README.md: metrics/report.md: row 'bc5cdr' of the first table has 2 cells, its header 4: "
        "no 'difference' cell",
    ),
    "a Latin-1 README": (
        REPORT,
        "# Caf\xe9\n" + BLOCK,
        "error: README.md:1: not UTF-8 (byte 0xe9 at byte offset 5); save it as UTF-8",
    ),
    "a Latin-1 source": (
        REPORT + "caf\xe9\n",
        BLOCK,
        f"error: README.md: metrics/report.md:12: not UTF-8 (byte 0xe9 at byte offset {len(REPORT) + 3}); save it as UTF-8",
    ),
    "a source above the root": (
        REPORT,
        "<!-- generated from ../outside.md: table 1 -->\nold\n<!-- end -->\n",
        "error: README.md:1: '../outside.md' is outside the repository; a sync reads only files under --root",
    ),
    "an absolute source": (
        REPORT,
        "<!-- generated from /etc/hostname: table 1 -->\nold\n<!-- end -->\n",
        "error: README.md:1: '/etc/hostname' is outside the repository; a sync reads only files under --root",
    ),
}


@pytest.mark.parametrize("check", [False, True], ids=["sync", "check"])
@pytest.mark.parametrize(("report", "readme", "message"), CASES.values(), ids=CASES.keys())
def test_sync_refuses_in_one_line_and_leaves_the_file(tmp_path, capsys, report, readme, message, check):
    root = tmp_path / "repo"
    (root / "metrics").mkdir(parents=True)
    (root / "metrics" / "report.md").write_bytes(report.encode("latin-1" if "\xe9" in report else "utf-8"))
    (tmp_path / "outside.md").write_text(REPORT)  # readable, so only the rule refuses it
    data = readme.encode("latin-1" if "\xe9" in readme else "utf-8")
    (root / "README.md").write_bytes(data)
    assert sync_docs.main(["--root", str(root), *(["--check"] if check else [])]) == 1
    assert capsys.readouterr().err == message + "\n"
    assert (root / "README.md").read_bytes() == data
    assert sorted(p.name for p in root.iterdir()) == ["README.md", "metrics"]  # no temporary left


def test_a_sync_keeps_the_line_endings_of_the_rest_of_the_file(tmp_path):
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "report.md").write_text(REPORT)
    (tmp_path / "README.md").write_bytes(b"# T\r\n\r\n" + CELL.encode())
    assert sync_docs.main(["--root", str(tmp_path)]) == 0
    assert (tmp_path / "README.md").read_bytes() == b"# T\r\n\r\n" + CELL.replace(">x<", ">+0.02<").encode()


def test_the_readme_stays_a_map():
    """At most 250 lines: detail belongs in docs/, which the README links."""
    from conftest import REPO

    assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) <= 250
