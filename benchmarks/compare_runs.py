"""Two runs of the pipeline side by side: which outputs are the same bytes, and how far apart their
numbers are where they are not. For checking that a run on another machine (another CPU model, a
GPU) reproduces the committed one, stage by stage, as far as the other run got.

    python benchmarks/compare_runs.py OTHER            # OTHER: another checkout's root, after (part of) its dvc repro
    python benchmarks/compare_runs.py OTHER --root A   # A against OTHER (default: this checkout)

It reads, in both projects:

1. each output that this project's ``dvc.lock`` records, against the other project's copy on disk,
   hashed as DVC hashes it: the same bytes or not, or not there; and whether the other project's own
   ``dvc.lock`` records what is on its disk (not yet, while a stage runs there);
2. ``metrics/**/*.json``: every number, except what measures the machine rather than the result
   (``wall_seconds``, ``tokens_per_second``, ``train_seconds_this_run`` and the ``environment``
   block): how many are equal (the metrics keep 4 decimals, so equal means equal at the digits
   reported), the largest difference and where it is;
3. ``plots/**/curves/*.tsv`` (the training curves): the same, value by value, with the relative
   difference, since a loss and a learning rate differ in scale.

It can run while the other run is under way or after it stopped early: a stage with an output not
there, or with one its own ``dvc.lock`` does not record, has not run there (or not finished), and
the files its checkout came with (the git-tracked metrics and curves) are marked "not run there" and
left out of the numbers instead of comparing equal; so are the files no stage writes (a study's
table, ``metrics/studies.json``: git-tracked, the same in both checkouts). A stage whose every output
is git-tracked cannot be told apart that way (none in the default pipeline but ``code_fingerprint``,
which always runs). Exit 0 whatever the comparison finds (it is a report); 1 when a project has no ``dvc.lock``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path, PurePosixPath

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from machine import HelpFormatter  # noqa: E402

from minisci.errors import MinisciError  # noqa: E402
from minisci.stage import run_command  # noqa: E402

MACHINE_KEYS = {"wall_seconds", "tokens_per_second", "train_seconds_this_run", "environment"}  # keys, curve names


def lock_outputs(root: Path) -> dict[str, dict[str, str]]:
    """stage -> {output path: its hash} from ``root/dvc.lock``."""
    path = root / "dvc.lock"
    if not path.is_file():
        raise MinisciError(f"{path}: no dvc.lock (run dvc repro there first)")
    stages = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("stages") or {}
    return {
        name: {out["path"]: out.get("md5") or out.get("hash") or "" for out in stage.get("outs") or []}
        for name, stage in stages.items()
    }


def numbers(obj, where: str = "") -> dict[str, float]:
    """Every number in a JSON value by its path (``a.b[2].c``), the machine's measurements left out."""
    found = {}
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key not in MACHINE_KEYS:
                found |= numbers(value, f"{where}.{key}" if where else str(key))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            found |= numbers(value, f"{where}[{i}]")
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        found[where] = float(obj)
    return found


def curve_numbers(path: Path) -> dict[str, float]:
    """The numeric cells of a curve's TSV by row and column name (DVCLive's step, value)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    header = lines[0].split("\t") if lines else []
    found = {}
    for row, line in enumerate(lines[1:], start=1):
        for column, cell in zip(header, line.split("\t")):
            if column == "timestamp":
                continue
            try:
                found[f"{row}.{column}"] = float(cell)
            except ValueError:
                pass
    return found


def difference(a: float, b: float, relative: bool) -> float:
    if a == b:
        return 0.0
    if relative:
        return abs(a - b) / max(abs(a), abs(b))
    return abs(a - b)


def compare_numbers(mine: dict[str, float], other: dict[str, float], relative: bool = False) -> dict:
    """How many numbers of the two are equal, the largest difference and its place, and the paths
    only one side has."""
    both = sorted(set(mine) & set(other))
    diffs = {
        key: difference(mine[key], other[key], relative)
        for key in both
        if not (math.isnan(mine[key]) and math.isnan(other[key]))
    }
    worst = max(diffs, key=diffs.get, default=None)
    return {
        "numbers": len(both),
        "equal": sum(1 for key in both if key not in diffs or diffs[key] == 0),
        "largest": diffs[worst] if worst is not None else 0.0,
        "where": worst if worst is not None and diffs[worst] > 0 else "",
        "mine": mine[worst] if worst is not None and diffs[worst] > 0 else None,
        "other": other[worst] if worst is not None and diffs[worst] > 0 else None,
        "unmatched": len(set(mine) ^ set(other)),
    }


def disk_hash(path: Path) -> str | None:
    """DVC's hash of a file or folder as it is on disk now (dvc-data's own computation, the value
    ``dvc.lock`` records: ``<md5>`` or ``<md5>.dir``), or None when it is not there."""
    if not path.exists():
        return None
    import tempfile

    from dvc_data.hashfile.build import build
    from dvc_data.hashfile.db import HashFileDB
    from dvc_objects.fs.local import LocalFileSystem

    fs = LocalFileSystem()
    with tempfile.TemporaryDirectory() as staging:
        _, _, obj = build(HashFileDB(fs, staging), str(path), fs, "md5", dry_run=True)
    return obj.hash_info.value


NOT_RUN = "not run there"


def compare_outputs(mine: dict, other_root: Path, other: dict) -> list[tuple[str, str, str, str]]:
    """(stage, output, bytes, recorded) for every output of this run's lock: whether the other
    project's copy on disk has the hash this lock records, and whether its own lock records what is
    on its disk. A stage with an output not there, or not recorded (no: still running there, or not
    run and left older files), has not run there: its outputs that are there are its checkout's
    files, ``NOT_RUN`` instead of a comparison."""
    rows = []
    for stage, outs in mine.items():
        found = {path: disk_hash(other_root / path) for path in outs}
        recorded = {path: other.get(stage, {}).get(path) == there for path, there in found.items()}
        ran = all(there is not None for there in found.values()) and all(recorded.values())
        for path, digest in outs.items():
            there = found[path]
            if there is None:
                verdict = "not there"
            elif not ran:
                verdict = NOT_RUN
            else:
                verdict = "same" if there == digest else "differ"
            rows.append((stage, path, verdict, "" if there is None else "yes" if recorded[path] else "no"))
    return rows


def not_run(outputs: list[tuple[str, str, str, str]]) -> list[str]:
    """The output paths of the stages that have not run there (see :func:`compare_outputs`)."""
    stages = {stage for stage, _, verdict, _ in outputs if verdict in ("not there", NOT_RUN)}
    return [path for stage, path, _, _ in outputs if stage in stages]


def under(name: str, paths: list[str]) -> bool:
    """Whether the relative path ``name`` is one of ``paths`` or inside one of them."""
    return any(PurePosixPath(name).is_relative_to(p) for p in paths)


def files(root: Path, pattern: str) -> dict[str, Path]:
    """The files matching ``pattern`` under ``root`` by relative path, less the machine's measurements
    (a curve of tokens/s)."""
    return {
        p.relative_to(root).as_posix(): p
        for p in sorted(root.glob(pattern))
        if p.is_file() and p.stem not in MACHINE_KEYS
    }


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.10g}"


def report(root: Path, other: Path) -> str:
    lines = [
        f"# {root} against {other}",
        "",
        "## Outputs: the hashes this dvc.lock records, against the other project's files on disk",
        "",
        "| stage | output | bytes | recorded in its dvc.lock |",
        "|---|---|---|---|",
    ]
    outputs = compare_outputs(lock_outputs(root), other, lock_outputs(other))
    lines += [f"| {stage} | {path} | {verdict} | {recorded} |" for stage, path, verdict, recorded in outputs]
    counts = {
        v: sum(1 for _, _, verdict, _ in outputs if verdict == v) for v in ("same", "differ", "not there", NOT_RUN)
    }
    lines += ["", ", ".join(f"{n} {v}" for v, n in counts.items()), ""]
    skipped = not_run(outputs)
    produced = [path for _, path, _, _ in outputs]
    for title, pattern, read, relative in (
        (
            "Metrics (every number but the machine's timings)",
            "metrics/**/*.json",
            lambda p: numbers(json.loads(p.read_text(encoding="utf-8"))),
            False,
        ),
        ("Training curves (relative differences)", "plots/**/curves/*.tsv", curve_numbers, True),
    ):
        mine, theirs = files(root, pattern), files(other, pattern)
        lines += [
            f"## {title}",
            "",
            "| file | numbers | equal | largest difference | where | here | there | on one side only |",
            "|---|---|---|---|---|---|---|---|",
        ]
        missing, unstaged = 0, []
        for name, path in mine.items():
            if not under(name, produced):  # written by no stage (a study table): the same in both checkouts
                unstaged.append(name)
                continue
            if name not in theirs or under(name, skipped):  # not written there, or its checkout's copy
                missing += 1
                continue
            c = compare_numbers(read(path), read(theirs[name]), relative)
            if c["numbers"] == 0:
                continue
            lines.append(
                f"| {name} | {c['numbers']} | {c['equal']} | {_fmt(c['largest'])} | {c['where']} | {_fmt(c['mine'])} | {_fmt(c['other'])} | {c['unmatched']} |"
            )
        lines += [
            "",
            f"{missing} files not written there yet, or left out as their stage has not run there."
            if missing
            else "Every file is there too.",
            "",
        ]
        if unstaged:
            lines += [f"Left out as no stage of this dvc.lock writes them: {', '.join(unstaged)}.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    p.add_argument("other", type=Path, help="the other project's root (a checkout after its dvc repro)")
    p.add_argument("--root", type=Path, default=REPO, help="this project's root: this checkout")
    args = p.parse_args(argv)
    print(report(args.root.resolve(), args.other.resolve()))


if __name__ == "__main__":
    sys.exit(run_command(main))
