"""The README and docs/ against the code and the generated reports: every relative link resolves,
every command shown names a module, subcommand and options that exist, every generated table equals
its source, and no history (commit hashes, sessions) creeps in."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import io
import re
import shlex
import sys
from functools import cache
from pathlib import Path

import pytest
from conftest import committed_tree

from minisci.errors import MinisciError
from minisci.report import sync_docs

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", ROOT / "benchmarks" / "README.md", *(ROOT / "docs").glob("*.md")])
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
INLINE = re.compile(r"`([^`\n]+)`")


def _ids(paths):
    return [str(p.relative_to(ROOT)) for p in paths]


def _prose(text: str) -> str:
    """The text without fenced code blocks (links inside them are code, not links) and HTML comments."""
    return re.sub(r"<!--.*?-->", "", FENCE.sub("", text), flags=re.S)


# --- links -------------------------------------------------------------------------------------------


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower-cased, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in _prose(path.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
    return frozenset(out)


def broken_links(doc: Path) -> list[str]:
    bad = []
    for target in LINK.findall(_prose(doc.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # http:, https:, mailto:
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists():
            bad.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target} (no heading #{anchor} in {dest.name})")
    return bad


@pytest.mark.parametrize("doc", DOCS, ids=_ids(DOCS))
def test_relative_links_resolve(doc):
    assert broken_links(doc) == []


def test_a_broken_link_is_found(tmp_path):
    (tmp_path / "other.md").write_text("# A heading\n")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# Top\n[ok](other.md#a-heading) [ok](#top) [web](https://example.org/x)\n"
        "[gone](missing.md) [bad anchor](other.md#nope) ![img](pic.png)\n```\n[code](not-a-link.md)\n```\n"
    )
    assert broken_links(doc) == [
        "missing.md (no such file)",
        "other.md#nope (no heading #nope in other.md)",
        "pic.png (no such file)",
    ]


# --- commands ----------------------------------------------------------------------------------------


class _Captured(Exception):
    def __init__(self, parser):
        self.parser = parser


def _capture(main) -> argparse.ArgumentParser | None:
    """The parser a ``main(argv)`` builds, taken when it parses (so nothing runs)."""

    def grab(self, *args, **kwargs):
        raise _Captured(self)

    saved = argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args
    argparse.ArgumentParser.parse_args = argparse.ArgumentParser.parse_known_args = grab
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            main(["--help"])
    except _Captured as c:
        return c.parser
    except (Exception, SystemExit):
        return None
    finally:
        argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args = saved
    return None


@cache
def module_parser(name: str) -> tuple[bool, argparse.ArgumentParser | None]:
    """(exists, parser) for ``python -m name``; no parser when the module parses no arguments with argparse."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False, None
    if spec is None:
        return False, None
    if spec.submodule_search_locations is not None and importlib.util.find_spec(f"{name}.__main__") is None:
        return False, None  # a package without __main__ cannot be run with -m
    module = importlib.import_module(name)
    if name == "minisci.serve.cli" or name == "minisci":
        return True, None
    main = getattr(module, "main", None)
    source = Path(getattr(module, "__file__", "") or "")
    if main is None or "argparse" not in source.read_text(encoding="utf-8"):
        return True, None
    return True, _capture(main)


@cache
def script_parser(rel: str) -> tuple[bool, argparse.ArgumentParser | None]:
    """(exists, parser) for ``python <rel>`` (a stage or benchmark script)."""
    path = ROOT / rel
    if not path.is_file():
        return False, None
    spec = importlib.util.spec_from_file_location(f"_doc_script_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    main = getattr(module, "main", None)
    return True, (_capture(main) if main else None)


@cache
def cli_parser() -> argparse.ArgumentParser:
    from minisci.serve.cli import build_parser

    return build_parser()


def _placeholder(token: str) -> bool:
    return bool(re.search(r"[<>$]|\.\.\.", token)) or bool(re.fullmatch(r"[A-Z][A-Z_]*", token))


def check_args(parser: argparse.ArgumentParser, args: list[str]) -> list[str]:
    """Options and subcommands in ``args`` that ``parser`` does not know (positional values pass)."""
    bad = []
    for token in args:
        if token == "--":
            break
        if _placeholder(token):
            if parser._subparsers is not None:
                break  # a placeholder where the subcommand goes: nothing further can be checked
            continue
        if token.startswith("-") and not re.fullmatch(r"-\d[\d.e-]*", token):
            name = token.split("=", 1)[0]
            action = parser._option_string_actions.get(name)
            if action is None:
                bad.append(f"{parser.prog}: no option {name}")
            elif isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                break
            continue
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subs:
            if token not in subs[0].choices:
                bad.append(f"{parser.prog}: no subcommand {token!r}")
                break
            parser = subs[0].choices[token]
    return bad


def split_commands(line: str) -> list[list[str]]:
    """Simple commands of a shell line (split at |, &&, ;, $( and parentheses; comments dropped)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:
        return []
    commands, cur = [], []
    for tok in tokens:
        if set(tok) <= set("();<>|&$"):
            commands.append(cur)
            cur = []
        else:
            cur.append(tok)
    commands.append(cur)
    return [c for c in commands if c]


@cache
def _params() -> dict:
    import yaml

    return yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))


def _param_exists(key: str) -> bool:
    node = _params()
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def check_command(words: list[str]) -> list[str]:
    """What is wrong with one shell command, if it runs minisci, a stage or a benchmark."""
    while words and re.fullmatch(r"\w+=.*", words[0]):
        words = words[1:]  # VAR=value prefixes
    if not words:
        return []
    if words[0] == "minisci":
        return check_args(cli_parser(), words[1:])
    if words[:3] == ["dvc", "exp", "run"]:
        keys = [words[i + 1].split("=", 1)[0] for i, w in enumerate(words[:-1]) if w in ("-S", "--set-param")]
        return [f"dvc exp run -S {k}: no such key in params.yaml" for k in keys if not _param_exists(k)]
    if words[0] == "torchrun" or (words[0] in ("python", "python3") and len(words) > 1):
        rest = words[1:]
        if words[0] == "python" and rest[0] == "-m":
            name = rest[1] if len(rest) > 1 else ""
            if not (name == "minisci" or name.startswith("minisci.")):
                return []
            exists, parser = module_parser(name)
            if not exists:
                return [f"python -m {name}: no such runnable module"]
            return check_args(parser, rest[2:]) if parser else []
        scripts = [i for i, w in enumerate(rest) if re.match(r"^(stages|benchmarks)/.*\.py$", w)]
        if not scripts:
            return []
        rel = rest[scripts[0]]
        exists, parser = script_parser(rel)
        if not exists:
            return [f"{rel}: no such script"]
        return check_args(parser, rest[scripts[0] + 1 :]) if parser else []
    return []


def shown_commands(doc: Path) -> list[str]:
    """Command lines of the doc's shell code blocks ($-prompted lines of console blocks) and inline code."""
    text = doc.read_text(encoding="utf-8")
    lines = []
    for lang, body in FENCE.findall(text):
        if lang not in ("bash", "sh", "shell", "console", ""):
            continue
        body = body.replace("\\\n", " ")
        for line in body.splitlines():
            if lang == "console" or line.startswith("$ "):
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            lines.append(line)
    for span in INLINE.findall(_prose(text)):
        if re.match(r"^(minisci |python -m minisci|python (stages|benchmarks)/|torchrun )", span):
            lines.append(span)
    return lines


@pytest.mark.parametrize("doc", DOCS, ids=_ids(DOCS))
def test_shown_commands_exist(doc):
    bad = [
        f"{line.strip()!r}: {e}" for line in shown_commands(doc) for c in split_commands(line) for e in check_command(c)
    ]
    assert bad == []


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("minisci ner --model m --jsonl 'a text'", None),
        ("minisci COMMAND --help", None),
        ("minisci nre --model m", "no subcommand 'nre'"),
        ("echo x | minisci ner --modle m", "no option --modle"),
        ("minisci search --index i -k 3 query", None),
        ("minisci reviewers --index i a.txt --exclude 'A B' --aggregation=max", None),
        ("python -m minisci.report.studies queue --only a b  # a comment", None),
        ("python -m minisci.report.studies enqueue", "no subcommand 'enqueue'"),
        ("python -m minisci.report.experiments --out x.md --studiez y.md", "no option --studiez"),
        ("python -m minisci.report.nothing", "no such runnable module"),
        ("python -m minisci.report.sync_docs --check", None),
        ("python stages/prepare_data.py --dataset d --data x --out y", None),
        ("python stages/prepare_data.py --datset d", "no option --datset"),
        ("python stages/nothing.py", "no such script"),
        ("python benchmarks/ranges.py --write", None),
        ("torchrun --nproc_per_node 4 stages/pretrain.py --data p --outt m", "no option --outt"),
        ("dvc exp run $(python -m minisci.report.sync_docs --chek)", "no option --chek"),
        ("python -m pytest --whatever", None),
        ("dvc exp run -S finetune_ner.epochs=3 -S 'finetune_ner.datasets=[a,b]'", None),
        ("dvc exp run --queue -S pretrain.nsp=false --set-param pretrain.nps=false", "pretrain.nps: no such key"),
    ],
)
def test_command_check(line, problem):
    problems = [e for c in split_commands(line) for e in check_command(c)]
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problem in problems[0]


# --- generated tables ------------------------------------------------------------------------------


def test_generated_blocks_equal_their_sources(tmp_path):
    """Run `python -m minisci.report.sync_docs` when this fails: a table was edited by hand or regenerated.
    With an experiment's params and results in the workspace (a profile's run), the commit is checked."""
    assert sync_docs.stale(committed_tree(tmp_path)) == []


def test_every_doc_with_results_has_generated_blocks():
    for name in ("README.md", "docs/findings.md", "docs/studies.md"):
        assert "<!-- generated from metrics/" in (ROOT / name).read_text(encoding="utf-8"), name


REPORT_OLD = """# results

| task | dataset | difference | 95% CI |
|---|---|---|---|
| NER | bc5cdr | -0.10 | [-0.45, +0.26] |

## Details

| a | b |
|---|---|
| 1 | 2 |

## Pretraining (held-out pairs)

| | MLM |
|---|---|
| before | 0.00 |

![chart](../plots/x.png)
"""

# the same report in a later format: a new column, a verdict, a new section before the old ones
REPORT_NEW = """# results

Some new preamble line.

| task | dataset | verdict | difference | 95% CI | MDE |
|---|---|---|---|---|---|
| classification | scicite | inconclusive | +0.52 | [-0.52, +1.61] | 1.2 |
| NER | bc5cdr | equivalent | -0.12 | [-0.40, +0.20] | 0.5 |

## Errors

| kind | count |
|---|---|
| boundary | 12 |

## Pretraining (held-out pairs, both arms)

| | MLM |
|---|---|
| before | 0.01 |
"""

DOC = """# Doc
Headline: <!-- generated from metrics/report.md: cell "bc5cdr" "difference" -->old<!-- end -->.

<!-- generated from metrics/report.md: table 1 -->
stale
<!-- end -->

<!-- generated from metrics/report.md: section "Pretraining" -->
<!-- end -->
"""


def _project(tmp_path, report: str) -> Path:
    (tmp_path / "metrics").mkdir(exist_ok=True)
    (tmp_path / "docs").mkdir(exist_ok=True)
    (tmp_path / "metrics" / "report.md").write_text(report)
    (tmp_path / "docs" / "page.md").write_text(DOC)
    return tmp_path


def test_sync_copies_by_heading_and_table_not_by_line(tmp_path):
    root = _project(tmp_path, REPORT_OLD)
    assert sync_docs.stale(root) == ["docs/page.md"]
    assert sync_docs.main(["--root", str(root)]) == 0
    page = (root / "docs" / "page.md").read_text()
    assert 'Headline: <!-- generated from metrics/report.md: cell "bc5cdr" "difference" -->-0.10<!-- end -->.' in page
    assert "| NER | bc5cdr | -0.10 | [-0.45, +0.26] |\n<!-- end -->" in page
    assert "| before | 0.00 |" in page and "![chart](../plots/x.png)" in page  # the link rebased from metrics/
    assert sync_docs.stale(root) == [] and sync_docs.main(["--root", str(root), "--check"]) == 0

    (root / "metrics" / "report.md").write_text(REPORT_NEW)  # a rerun in the new format
    assert sync_docs.main(["--root", str(root), "--check"]) == 1
    sync_docs.main(["--root", str(root)])
    page = (root / "docs" / "page.md").read_text()
    assert '"difference" -->-0.12<!-- end -->' in page
    assert "| NER | bc5cdr | equivalent | -0.12 | [-0.40, +0.20] | 0.5 |" in page
    assert "| before | 0.01 |" in page and "boundary" not in page


RUN_DOC = """# Serving

<!-- generated by running the $ lines -->
```console
$ cat models/out.txt
an old output
of two lines
$ echo "given" > note.txt
$ cat note.txt | tr a-z A-Z
```
<!-- end -->
"""


def test_sync_run_refreshes_example_outputs_only_when_asked(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "out.txt").write_text("entity 0.991\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(RUN_DOC)
    assert sync_docs.stale(tmp_path) == [] and sync_docs.main(["--root", str(tmp_path), "--check"]) == 0
    assert sync_docs.main(["--root", str(tmp_path), "--run"]) == 0
    page = (tmp_path / "docs" / "page.md").read_text()
    expected = '$ cat models/out.txt\nentity 0.991\n$ echo "given" > note.txt\n$ cat note.txt | tr a-z A-Z\nGIVEN\n```\n<!-- end -->'
    assert expected in page and "an old output" not in page
    assert not (tmp_path / "note.txt").exists()  # commands run in a scratch folder, not in the repository
    assert sync_docs.stale(tmp_path, run=True) == []


def test_sync_run_names_the_command_that_failed(tmp_path, capsys):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(RUN_DOC)
    assert sync_docs.main(["--root", str(tmp_path), "--run"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        "error: docs/page.md: '$ cat models/out.txt' exited with 1: cat: models/out.txt: No such file"
    )
    assert (tmp_path / "docs" / "page.md").read_text() == RUN_DOC


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ('section "Nowhere"', "no heading starting with 'Nowhere'"),
        ("table 4", "the file has 3 table\\(s\\), not a table 4"),
        ('cell "jnlpba" "difference"', "no row 'jnlpba'"),
        ("row 2", "unknown selector"),
    ],
)
def test_sync_names_what_it_cannot_find(tmp_path, selector, message):
    root = _project(tmp_path, REPORT_OLD)
    (root / "docs" / "page.md").write_text(f"<!-- generated from metrics/report.md: {selector} -->\n<!-- end -->\n")
    with pytest.raises(MinisciError, match=f"docs/page.md: metrics/report.md: {message}"):
        sync_docs.stale(root)


def test_a_heading_prefix_of_two_sections_is_refused_and_an_exact_heading_wins(tmp_path):
    """A section added to the report later ("Pretraining seeds ...") must not take the place of the one
    a doc meant ("Pretraining (held-out pairs)")."""
    report = REPORT_OLD.replace(
        "## Pretraining (held-out pairs)",
        "## Pretraining seeds\n\n| a |\n|---|\n| 1 |\n\n## Pretraining (held-out pairs)",
    )
    root = _project(tmp_path, report)
    page = root / "docs" / "page.md"
    page.write_text('<!-- generated from metrics/report.md: table 1 in "Pretraining" -->\n<!-- end -->\n')
    with pytest.raises(
        MinisciError, match=r"2 headings start with 'Pretraining' \(Pretraining seeds; Pretraining \(held"
    ):
        sync_docs.stale(root)
    page.write_text('<!-- generated from metrics/report.md: table 1 in "Pretraining seeds" -->\n<!-- end -->\n')
    assert "| 1 |" in sync_docs.select(report, 'table 1 in "Pretraining seeds"')


# --- benchmark ranges -----------------------------------------------------------------------------


@cache
def _ranges():
    spec = importlib.util.spec_from_file_location("_doc_ranges", ROOT / "benchmarks" / "ranges.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_benchmark_ranges_equal_the_run_logs():
    """Run `python benchmarks/ranges.py --write` when this fails."""
    ranges = _ranges()
    text = ranges.README.read_text(encoding="utf-8")
    assert ranges.replace_block(text, ranges.render()) == text


def test_ranges_read_console_lines_and_recorded_values(tmp_path):
    (tmp_path / "a.txt").write_text(
        "# cpu: Test CPU\n# date: 2026-01-01\n$ python benchmarks/pretrain_throughput.py\n"
        "ratio ours/naive: 2.00x\n"
        "fp32 ceiling: 100 GFLOP/s peak (measured now) | ours 50.0 GFLOP/s of matrix products = 50% of ceiling\n"
    )
    (tmp_path / "b.txt").write_text(
        "# cpu: Test CPU\n# date: 2026-01-02\n# value: pretrain_ceiling_pct = 60\n# value: pretrain_vs_naive = 1.5..2.5\n"
    )
    table = _ranges().render(tmp_path)
    assert (
        "| pretraining fp32, % of the roofline ceiling | ≥ 75% | 2 | 50%–60% | 60% ([2026-01-02](runs/b.txt)) |"
        in table
    )
    assert "| 2 | 1.50x–2.50x | 1.50x–2.50x ([2026-01-02](runs/b.txt)) |" in table


def test_ranges_count_native_bf16_fine_tuning_and_not_the_emulated_drift(tmp_path):
    head = "# cpu: Test CPU\n# date: 2026-01-01\n"
    (tmp_path / "native.txt").write_text(
        head + "data: scicite, 7320 training texts, mean 56.2 word pieces | batch 32, 100 steps\n"
        "  ours fp32:   2000.0 ±  1.0 (min 1999.0, max 2001.0) real tokens/s | ratio 1.00x | 100 steps in 60 s\n"
        "  ours bf16:   1400.0 ±  1.0 (min 1399.0, max 1401.0) real tokens/s | ratio 0.70x | 100 steps in 85 s\n"
    )
    (tmp_path / "emulated.txt").write_text(
        head + "data: bc5cdr, 3951 training windows, mean 35.7 word pieces | batch 32, 100 steps\n"
        "  ours bf16 emulated (no native bf16, so drift only, not a speed):   1463.1 real tokens/s | ratio 0.85x\n"
    )
    table = _ranges().render(tmp_path)
    assert "| fine-tuning SciCite, 100 steps, ours bf16 / ours fp32 (native bf16) | ≥ 1.5x | 1 | 0.70x |" in table
    assert "BC5CDR, 100 steps, ours bf16" not in table


# --- no history in the docs ------------------------------------------------------------------------

HISTORY = re.compile(
    r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b|\bsessions?\b|\bsittings?\b|\bissue \d", re.I
)


@pytest.mark.parametrize("doc", DOCS, ids=_ids(DOCS))
def test_no_history_in_the_docs(doc):
    hits = [line for line in doc.read_text(encoding="utf-8").splitlines() if HISTORY.search(line)]
    assert hits == []


def test_sync_with_a_missing_root_is_one_line_error(tmp_path, capsys):
    assert sync_docs.main(["--root", str(tmp_path / "nope"), "--run"]) == 1
    assert capsys.readouterr().err == f"error: --root {tmp_path / 'nope'}: not a directory\n"


def test_the_stated_total_wall_time_is_the_tables_sum():
    """docs/pipeline.md states the committed run's total beside the generated per-stage table, and the README
    quotes it: they agree."""
    text = (ROOT / "docs/pipeline.md").read_text()
    stated = re.search(r"the stages below took ([\d,]+) s \((\d+) h (\d+) min\)", text)
    assert stated, "docs/pipeline.md no longer states the total"
    table = text.split('<!-- generated from metrics/report.md: table 1 in "Wall time" -->')[1].split("<!-- end -->")[0]
    total = sum(float(row.split("|")[2]) for row in table.strip().splitlines()[2:])
    assert int(stated[1].replace(",", "")) == round(total)
    assert (int(stated[2]), int(stated[3])) == divmod(round(total / 60), 60)
    assert f"the committed run's stages took {stated[2]} h {stated[3]} min" in (ROOT / "README.md").read_text()
