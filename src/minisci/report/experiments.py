"""The experiment log: ``dvc exp show --json`` as a Markdown table, one row per experiment.

Usage: python -m minisci.report.experiments --out metrics/experiments.md
           [--json FILE] [--metrics delta,test.f1,test.macro_f1,p_value] [--metrics-file metrics/summary.json]

Each baseline commit is a row, followed by its experiments (oldest first). A row shows the params
that differ from its baseline commit anywhere in the log (one column per such key), the headline
metrics (keys of ``--metrics-file`` containing any of the ``--metrics`` substrings), and the
``dvc exp run -S key=value ...`` command that reproduces the experiment from its baseline commit.
Without ``--json`` the script runs ``dvc exp show --json --all-commits`` in the current directory, so
experiments of earlier baseline commits stay in the log after new commits. Rows of the log already at
``--out`` that ``dvc exp show`` does not list here (experiments run in another clone: their refs and
cache stay there) are kept, marked carried, unless ``--no-carry``.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path
from typing import Any

from minisci.errors import MinisciError
from minisci.io import atomic_path
from minisci.report.exp_show import flatten, format_value, params_of, read_show
from minisci.report.studies import load_spec

DEFAULT_METRICS = ("delta", "test.f1", "test.macro_f1", "p_value")


# 1. rows of dvc exp show --json ---------------------------------------------------------------------


def _row(entry: dict, metrics_file: str, baseline: str | None, state: str) -> dict:
    data = entry.get("data") or {}
    metrics = ((data.get("metrics") or {}).get(metrics_file) or {}).get("data") or {}
    state = "failed" if entry.get("error") else {"success": "done"}.get(state, state)  # DVC's queue says success
    return {
        "name": entry.get("name") or (entry.get("rev") or "")[:7],
        "rev": (entry.get("rev") or "")[:7],
        "baseline": baseline,
        "timestamp": data.get("timestamp") or "",
        "state": state,
        "params": params_of(data),
        # dvc exp show gives a queued, running or failed experiment the metrics files it was queued with
        # (after a profile's run, that run's): not its results
        "metrics": {} if state in {"queued", "running", "failed"} else flatten(metrics),
    }


def experiment_rows(show: list[dict], metrics_file: str) -> list[dict]:
    """Baseline commits, each followed by its experiments (oldest first). The workspace is left out,
    and so are older commits without experiments (``dvc exp show --all-commits`` lists every commit):
    the first commit (HEAD) is always a row, as the reference the log is read against."""
    rows = []
    commits = [c for c in show if c.get("rev") != "workspace"]
    for i, commit in enumerate(commits):
        if i > 0 and not commit.get("experiments"):
            continue
        base = _row(commit, metrics_file, None, "baseline")
        exps = []
        for exp in commit.get("experiments") or []:
            revs = exp.get("revs") or []
            if revs:  # the newest rev of the experiment
                state = (exp.get("executor") or {}).get("state") or "done"
                exps.append(_row(revs[0], metrics_file, base["name"], state))
        rows += [base, *sorted(exps, key=lambda r: (r["timestamp"], r["name"]))]
    return rows


# 2. the reproducing command -------------------------------------------------------------------------


def changed_params(row: dict, baseline: dict) -> dict[str, Any]:
    return {k: v for k, v in sorted(row["params"].items()) if baseline["params"].get(k, object()) != v}


def reproduce_command(changes: dict[str, Any]) -> str:
    return " ".join(["dvc exp run", *(f"-S {shlex.quote(f'{k}={format_value(v)}')}" for k, v in changes.items())])


# 3. the table -----------------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    if value is None or value == "":
        return ""
    text = format_value(round(value, 4) if isinstance(value, float) else value)
    return text.replace("|", "\\|")


def spec_commands(rows: list[dict], spec) -> dict[str, tuple[str, bool]]:
    """Experiment name -> (the studies spec's ``dvc exp run`` command, whether it runs stage targets
    only), for the rows whose params match their spec entry (a same-named experiment run by hand
    with other overrides keeps the generic command)."""
    out = {}
    baselines = {r["name"]: r for r in rows if r["baseline"] is None}
    for row in rows:
        exp = spec.experiments.get(row["name"]) if row["baseline"] else None
        if exp is None:
            continue
        change = changed_params(row, baselines[row["baseline"]])
        if all(row["params"].get(k) == v for k, v in exp.set.items()) and all(k in exp.set for k in change):
            out[row["name"]] = (exp.shell(), bool(exp.targets) and "export_metrics" not in exp.targets)
    return out


def experiments_table(
    rows: list[dict],
    metric_patterns: tuple[str, ...],
    commands: dict[str, tuple[str, bool]] | None = None,
    carried: list[dict[str, str]] | None = None,
) -> str:
    """The Markdown experiment log of ``rows`` (from :func:`experiment_rows`). ``commands`` (from
    :func:`spec_commands`) replaces the generic command of the experiments a studies spec defines; the
    summary metrics of those that ran stage targets only are left blank (their summary.json is the
    baseline commit's, not theirs). ``carried`` rows (from :func:`carried_rows`) follow as they were."""
    commands, carried = commands or {}, carried or []
    baselines = {r["name"]: r for r in rows if r["baseline"] is None}
    changes = [changed_params(r, baselines[r["baseline"]]) if r["baseline"] else {} for r in rows]
    is_metric = lambda key: any(p in key for p in metric_patterns)  # noqa: E731
    old_keys = {k for r in carried for k in r} - {"experiment", "rev", "state", "reproduce"}
    param_keys = sorted({k for c in changes for k in c} | {k for k in old_keys if not is_metric(k)})
    metric_keys = sorted(
        {k for r in rows for k in r["metrics"] if is_metric(k)} | {k for k in old_keys if is_metric(k)}
    )
    header = ["experiment", "rev", "state", *param_keys, *metric_keys, "reproduce"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row, change in zip(rows, changes):
        command = f"`{reproduce_command(change)}`" if row["baseline"] else f"`git checkout {row['rev']}`"
        targeted = False
        if row["baseline"] and row["name"] in commands:
            text, targeted = commands[row["name"]]
            command = f"`{text}`"
        cells = [row["name"], row["rev"], row["state"] + (" (stage targets; see studies)" if targeted else "")]
        cells += [_cell(row["params"].get(k)) for k in param_keys]
        cells += [_cell(None if targeted else row["metrics"].get(k)) for k in metric_keys]
        lines.append("| " + " | ".join([*cells, command.replace("|", "\\|")]) + " |")
    lines += ["| " + " | ".join(row.get(k, "") for k in header) + " |" for row in carried]
    return "\n".join(lines) + "\n"


CARRIED = " (carried)"


def _cells(line: str) -> list[str]:
    """The cells of a Markdown table row (``\\|`` inside a cell is not a separator)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])]


def read_log(path: Path) -> list[dict[str, str]]:
    """The rows of an experiment log this script wrote, as {column: cell}; [] when there is none."""
    if not path.is_file():
        return []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise MinisciError(
            f"{path}: cannot read the earlier experiment log ({e}); pass --no-carry to ignore it"
        ) from None
    start = next((i for i, line in enumerate(lines) if line.startswith("| experiment | rev | state |")), None)
    if start is None:
        return []
    header = _cells(lines[start])
    rows = []
    for n, line in enumerate(lines[start + 2 :], start + 3):
        if not line.startswith("|"):
            break
        cells = _cells(line)
        if len(cells) != len(header):
            raise MinisciError(
                f"{path}:{n}: {len(cells)} cells under a header of {len(header)}; pass --no-carry to ignore it"
            )
        rows.append(dict(zip(header, cells)))
    return rows


def carried_rows(previous: list[dict[str, str]], rows: list[dict]) -> list[dict[str, str]]:
    """The earlier log's rows that ``dvc exp show`` no longer lists here (a fresh clone has none of the
    experiment refs), marked carried in their state; not those queued or running then, nor older rows of
    an experiment name listed here, nor former baseline commits without experiments."""
    here = {(r["name"], r["rev"]) for r in rows}
    names = {r["name"] for r in rows if r["baseline"]}  # experiments listed here supersede their older rows
    out = []
    for old in previous:
        state = old.get("state", "")
        if (old.get("experiment"), old.get("rev")) in here or state.startswith(("queued", "running")):
            continue
        if not state.startswith("baseline") and old.get("experiment") in names:
            continue
        if state.startswith("baseline") and out and out[-1]["state"].startswith("baseline"):
            out.pop()  # a former HEAD without experiments of its own says nothing
        state = re.sub(r"^success\b", "done", state)  # logs written before DVC's success was logged as done
        out.append(old | {"state": state if CARRIED in state else state + CARRIED})
    if out and out[-1]["state"].startswith("baseline"):
        out.pop()
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="Markdown file to write (metrics/experiments.md)")
    p.add_argument("--json", help="saved output of dvc exp show --json (default: run it here)")
    p.add_argument(
        "--metrics",
        default=",".join(DEFAULT_METRICS),
        help="comma-separated substrings; metric keys containing any of them become columns",
    )
    p.add_argument("--metrics-file", default="metrics/summary.json", help="the metrics file whose keys are shown")
    p.add_argument("--spec", help="studies spec (default: the packaged minisci/report/studies.yaml)")
    p.add_argument(
        "--no-carry",
        action="store_true",
        help="write only what dvc exp show lists here (by default the earlier log's other rows are kept "
        "and marked carried)",
    )
    args = p.parse_args(argv)
    patterns = tuple(s.strip() for s in args.metrics.split(",") if s.strip())
    write_log(
        read_show(args.json), Path(args.out), load_spec(args.spec), patterns, args.metrics_file, not args.no_carry
    )


def write_log(show: list[dict], out: Path, spec, patterns: tuple[str, ...], metrics_file: str, carry: bool) -> None:
    """The experiment log of ``dvc exp show`` output at ``out`` (rows of the earlier log there kept
    and marked carried with ``carry``)."""
    rows = experiment_rows(show, metrics_file)
    if not rows:
        raise MinisciError("dvc exp show: no commits or experiments to log")
    carried = carried_rows(read_log(out), rows) if carry else []
    with atomic_path(out) as tmp:
        tmp.write_text(
            "# Experiment log\n\nGenerated by `python -m minisci.report` from `dvc exp show --json`; "
            "params are shown where they differ from the baseline commit. The experiments of the studies "
            "(`src/minisci/report/studies.yaml`) show the command that queued them; those that ran one stage "
            "have their results in [studies.md](studies.md). Rows marked (carried) are kept from the log written "
            "before: their experiments ran in another workspace, and their command reruns them.\n\n"
            + experiments_table(rows, patterns, spec_commands(rows, spec), carried),
            encoding="utf-8",
        )
    print(f"experiments: {len(rows)} rows" + (f" and {len(carried)} carried" if carried else "") + f" -> {out}")


if __name__ == "__main__":
    from minisci.stage import run_command

    sys.exit(run_command(main))
