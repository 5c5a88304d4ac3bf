"""Stage export_metrics: flat summary (metrics/summary.json), Markdown report with paired
bootstrap and published anchors (metrics/report.md), PNG charts (plots/charts/), per-type and
per-class F1 for DVC plots (plots/per_type_f1.json), for every dataset the fine-tuning stages ran.

Usage: python stages/export_metrics.py --metrics-dir metrics --models-dir models --plots-dir plots \\
           --summary metrics/summary.json --report metrics/report.md --charts plots/charts \\
           --per-type plots/per_type_f1.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from minisci.config import (
    ExportMetricsConfig,
    FinetuneClassificationConfig,
    FinetuneNerConfig,
    load_catalog,
    load_section,
)
from minisci.io import atomic_path, write_json
from minisci.report.export import TASKS, charts, collect, per_type_rows, report, summary
from minisci.stage import description, run_stage


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=description(__doc__))
    p.add_argument("--metrics-dir", required=True)
    p.add_argument("--models-dir", required=True, help="fine-tuned models with test_predictions.jsonl")
    p.add_argument("--plots-dir", required=True, help="training curves written by the training stages")
    p.add_argument("--summary", required=True)
    p.add_argument("--report", required=True)
    p.add_argument("--charts", required=True)
    p.add_argument("--per-type", required=True)
    p.add_argument("--params", default="params.yaml")
    args = p.parse_args(argv)

    cfg = load_section(ExportMetricsConfig, "export_metrics", args.params)
    runs = {
        "ner": load_section(FinetuneNerConfig, "finetune_ner", args.params).datasets,
        "classification": load_section(FinetuneClassificationConfig, "finetune_classification", args.params).datasets,
    }
    data = collect(Path(args.metrics_dir), Path(args.models_dir), cfg, runs, load_catalog(args.params))
    with atomic_path(args.charts) as tmp:
        charts(data, Path(args.plots_dir), tmp)
    with atomic_path(args.report) as tmp:
        tmp.write_text(report(data, cfg), encoding="utf-8")
    write_json(args.per_type, per_type_rows(data))
    write_json(args.summary, summary(data))
    for (task, ds), t in data["tasks"].items():
        b = t["bootstrap"]
        print(
            f"export_metrics: {ds} {TASKS[task].metric} adapted - baseline = {100 * b['difference']:+.2f} "
            f"[{100 * b['ci_low']:+.2f}, {100 * b['ci_high']:+.2f}], p = {b['p_value']:.3f}"
        )


if __name__ == "__main__":
    sys.exit(run_stage(main))
