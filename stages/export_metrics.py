"""Stage export_metrics: flat summary (metrics/summary.json), Markdown report with the seed-aware
bootstrap, verdicts, power, dataset health, errors and published anchors (metrics/report.md), PNG
charts (plots/charts/), per-type and per-class F1 for DVC plots (plots/per_type_f1.json), plot data
overlaying both arms at fixed paths (plots/compare/) and word-level CoNLL test predictions of the
NER models (data/predictions/), for every dataset the fine-tuning stages ran.

Usage: python stages/export_metrics.py --metrics-dir metrics --models-dir models --plots-dir plots \\
           --data-dir data/prepared --summary metrics/summary.json --report metrics/report.md \\
           --charts plots/charts --per-type plots/per_type_f1.json --compare plots/compare \\
           --predictions data/predictions
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from minisci.config import DATASETS_FILE, ExportMetricsConfig, ModelConfig, finetune_config, load_catalog, load_section
from minisci.io import atomic_path, write_json
from minisci.pretrain.seeds import load_seed_design
from minisci.report.export import (
    charts,
    collect,
    per_type_rows,
    report,
    summary,
    write_compare_plots,
    write_predictions,
)
from minisci.stage import description, run_stage
from minisci.tasks import registry


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=description(__doc__))
    p.add_argument("--metrics-dir", required=True)
    p.add_argument("--models-dir", required=True, help="fine-tuned models with test_predictions.jsonl")
    p.add_argument("--plots-dir", required=True, help="training curves written by the training stages")
    p.add_argument("--data-dir", required=True, help="prepared datasets (dataset health, classification texts)")
    p.add_argument("--summary", required=True)
    p.add_argument("--report", required=True)
    p.add_argument("--charts", required=True)
    p.add_argument("--per-type", required=True)
    p.add_argument("--compare", required=True, help="directory: plot data overlaying both arms (fixed paths)")
    p.add_argument("--predictions", required=True, help="directory: word-level CoNLL test predictions (NER)")
    p.add_argument("--params", default="params.yaml")
    p.add_argument("--catalogue", default=DATASETS_FILE, help=f"the dataset catalogue (default {DATASETS_FILE})")
    args = p.parse_args(argv)

    cfg = load_section(ExportMetricsConfig, "export_metrics", args.params)
    runs = {k.name: load_section(finetune_config(k), k.stage, args.params).datasets for k in registry.KINDS.values()}
    base = load_section(ModelConfig, "model", args.params).base
    catalog = load_catalog(args.catalogue)
    seeds = load_seed_design(args.params).seeds
    data = collect(Path(args.metrics_dir), Path(args.models_dir), cfg, runs, catalog, Path(args.data_dir), base, seeds)
    with atomic_path(args.charts) as tmp:
        charts(data, Path(args.plots_dir), tmp)
    with atomic_path(args.report) as tmp:
        tmp.write_text(report(data, cfg), encoding="utf-8")
    write_json(args.per_type, per_type_rows(data))
    with atomic_path(args.compare) as tmp:
        write_compare_plots(data, Path(args.plots_dir), tmp)
    with atomic_path(args.predictions) as tmp:
        tmp.mkdir()
        write_predictions(data, tmp)
    write_json(args.summary, summary(data))
    for (task, ds), t in data["tasks"].items():
        b = t["bootstrap"]
        print(
            f"export_metrics: {ds} {registry.get(task).metric} adapted - baseline = {100 * b['difference']:+.2f} "
            f"[{100 * b['ci_low']:+.2f}, {100 * b['ci_high']:+.2f}], p = {b['p_value']:.3f}: {b['verdict']} "
            f"(margin ±{100 * cfg.margin(task):.1f}; minimum detectable effect {100 * b['mde']:.2f})"
        )


if __name__ == "__main__":
    sys.exit(run_stage(main))
