"""Stage finetune_scicite: fine-tune one model arm on SciCite citation intent; choose the epoch on
dev (macro-F1), score test once; save the model, test predictions, metrics, confusion matrix, curves.

Usage: python stages/finetune_scicite.py --data data/raw --model models/adapted \\
           --out models/finetune_scicite/adapted --metrics metrics/finetune_scicite/adapted.json \\
           --plots plots/finetune_scicite/adapted --checkpoints models/finetune_checkpoints/scicite/adapted

A checkpoint is written at every epoch end into --checkpoints (a DVC ``persist`` output); an
interrupted run resumes from the newest complete one of the same params, data and base model.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from minisci.config import FinetuneSciciteConfig, load_section
from minisci.finetune.classification import run_finetune_scicite
from minisci.finetune.common import save_finetuned
from minisci.io import write_json
from minisci.stage import run_stage
from minisci.training import write_curves

CURVES = ("loss", "learning_rate", "dev_macro_f1", "dev_accuracy")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="output of fetch_data")
    p.add_argument("--model", required=True, help="encoder directory (models/baseline or models/adapted)")
    p.add_argument("--out", required=True)
    p.add_argument("--metrics", required=True)
    p.add_argument("--plots", required=True, help="directory: curves (DVCLive) and confusion.json")
    p.add_argument("--checkpoints", required=True, help="epoch checkpoints, kept across runs for resume")
    p.add_argument("--params", default="params.yaml")
    args = p.parse_args(argv)

    cfg = load_section(FinetuneSciciteConfig, "finetune_scicite", args.params)
    result = run_finetune_scicite(args.data, args.model, cfg, args.checkpoints)
    m = result.metrics
    save_finetuned(
        args.out,
        result,
        title=f"minisci SciCite citation intent ({args.model})",
        summary=f"Sequence classification ({', '.join(m['labels'])}) fine-tuned from `{args.model}`; epoch "
        f"{m['best_epoch']} chosen on dev macro-F1, test scored once. `test_predictions.jsonl` holds the test predictions.",
        base=args.model,
        data=f"SciCite train (dev for model selection) from {args.data}",
        params={"finetune_scicite": dataclasses.asdict(cfg)},
        metrics={
            "dev": {k: m["dev"][k] for k in ("accuracy", "macro_f1")},
            "test": {k: m["test"][k] for k in ("accuracy", "macro_f1", "per_class")},
            "best_epoch": m["best_epoch"],
        },
        usage=f'from transformers import pipeline\nclassify = pipeline("text-classification", model="{args.out}")\n'
        'classify("We used the protocol of Smith et al. (2001).")',
    )
    write_curves(result.log_history, args.plots, CURVES)
    # One row per test example, for DVC's confusion-matrix template.
    write_json(
        f"{args.plots}/confusion.json", [{"actual": r["gold"], "predicted": r["pred"]} for r in result.test_predictions]
    )
    write_json(args.metrics, result.metrics)
    print(
        f"finetune_scicite ({args.model}): best epoch {m['best_epoch']}, dev macro-F1 {m['dev']['macro_f1']:.4f}, "
        f"test accuracy {m['test']['accuracy']:.4f}, macro-F1 {m['test']['macro_f1']:.4f} ({m['wall_seconds']:.0f} s)"
    )


if __name__ == "__main__":
    sys.exit(run_stage(main))
