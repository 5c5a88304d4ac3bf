"""The experiment log and the studies: the one command that writes them.

Usage:
    python -m minisci.report                                  # metrics/experiments.md, metrics/studies.md
                                                              # (+ studies.json) and plots/studies/
    python -m minisci.report queue [--only NAME ...] [--dry-run]   # dvc exp run --queue, studies not run yet
    dvc queue start                                           # runs them, one at a time

Both read ``dvc exp show --json --all-commits`` (or ``--json FILE``) and the studies spec
(``src/minisci/report/studies.yaml``, or ``--spec``). Results of experiments this workspace has not
got (they ran in another clone) are carried over from the files written before, unless ``--no-carry``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from minisci.report.exp_show import read_show
from minisci.report.experiments import DEFAULT_METRICS, write_log
from minisci.report.studies import DEFAULT_SPEC, check_only, load_spec, queue, report

SUMMARY = "metrics/summary.json"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m minisci.report", description=__doc__.splitlines()[0])
    p.add_argument("command", nargs="?", choices=("write", "queue"), default="write", help="write (default) or queue")
    p.add_argument("--spec", help=f"studies spec (default: the packaged {DEFAULT_SPEC})")
    p.add_argument("--json", help="saved output of dvc exp show --json --all-commits (default: run it)")
    p.add_argument("--only", nargs="+", default=[], help="queue: experiment or study names (default: all)")
    p.add_argument("--dry-run", action="store_true", help="queue: print the commands only")
    p.add_argument("--experiments", default="metrics/experiments.md", help="the experiment log to write")
    p.add_argument("--studies", default="metrics/studies.md", help="the studies to write (.json beside it)")
    p.add_argument("--charts", default="plots/studies", help="the studies' charts")
    p.add_argument(
        "--metrics",
        default=",".join(DEFAULT_METRICS),
        help="comma-separated substrings; metric keys containing any of them become log columns",
    )
    p.add_argument(
        "--metrics-file",
        help=f"the metrics file whose keys are logged (default {SUMMARY}, where export_metrics has written it)",
    )
    p.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples")
    p.add_argument("--seed", type=int, default=13, help="bootstrap seed")
    p.add_argument(
        "--no-carry",
        action="store_true",
        help="write only what dvc exp show lists here (by default the earlier files' rows and studies of "
        "experiments not here are kept and marked carried)",
    )
    args = p.parse_args(argv)
    if args.resamples < 100:
        p.error(f"--resamples must be >= 100, got {args.resamples}")
    if not 0 <= args.seed < 2**32:  # numpy's seed range
        p.error(f"--seed must be in [0, 2**32 - 1], got {args.seed}")
    if args.metrics_file is not None and not Path(args.metrics_file).is_file():  # before any file is written
        p.error(f"--metrics-file {args.metrics_file}: no such file")
    spec = load_spec(args.spec)
    check_only(spec, args.only)  # before dvc exp show, which takes minutes the first time in a clone
    show = read_show(args.json)
    if args.command == "queue":
        queue(spec, args.only, args.dry_run, show)
        return
    studies = Path(args.studies)
    report(
        spec,
        show,
        Path.cwd(),
        studies,
        studies.with_suffix(".json"),
        Path(args.charts),
        args.resamples,
        args.seed,
        carry=not args.no_carry,
    )
    patterns = tuple(s.strip() for s in args.metrics.split(",") if s.strip())
    write_log(show, Path(args.experiments), spec, patterns, args.metrics_file or SUMMARY, not args.no_carry)


if __name__ == "__main__":
    from minisci.stage import run_command

    sys.exit(run_command(main))
