"""Stage finetune_ner: fine-tune one model arm on one NER dataset; choose the epoch on dev, score
test once; save the model (Hugging Face format, label maps), test predictions, metrics, curves.

Usage: python stages/finetune_ner.py --dataset bc5cdr --data data/raw --model models/adapted \\
           --out models/finetune_ner/bc5cdr/adapted --metrics metrics/finetune_ner/bc5cdr/adapted.json \\
           --plots plots/finetune_ner/bc5cdr/adapted --checkpoints models/finetune_checkpoints/ner/bc5cdr/adapted

A checkpoint is written at every epoch end into --checkpoints (a DVC ``persist`` output); an
interrupted run resumes from the newest complete one of the same params, data and base model.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from minisci.config import FinetuneNerConfig, load_section
from minisci.finetune.common import save_finetuned
from minisci.finetune.ner import run_finetune_ner
from minisci.io import write_json
from minisci.stage import run_stage
from minisci.training import write_curves

CURVES = ("loss", "learning_rate", "dev_f1", "dev_precision", "dev_recall")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", required=True)
    p.add_argument("--data", required=True, help="output of fetch_data")
    p.add_argument("--model", required=True, help="encoder directory (models/baseline or models/adapted)")
    p.add_argument("--out", required=True)
    p.add_argument("--metrics", required=True)
    p.add_argument("--plots", required=True)
    p.add_argument("--checkpoints", required=True, help="epoch checkpoints, kept across runs for resume")
    p.add_argument("--params", default="params.yaml")
    args = p.parse_args(argv)

    cfg = load_section(FinetuneNerConfig, "finetune_ner", args.params)
    result = run_finetune_ner(args.dataset, args.data, args.model, cfg, args.checkpoints)
    m = result.metrics
    save_finetuned(
        args.out,
        result,
        title=f"minisci NER: {args.dataset} ({args.model})",
        summary=f"Token classification ({', '.join(m['labels'])}) fine-tuned from `{args.model}`; epoch {m['best_epoch']} "
        "chosen on dev, test scored once (seqeval, strict IOB2). `test_predictions.jsonl` holds the test predictions.",
        base=args.model,
        data=f"{args.dataset} train (dev for model selection) from {args.data}",
        params={"finetune_ner": dataclasses.asdict(cfg)},
        metrics={
            "dev": {k: v for k, v in m["dev"].items() if k != "per_type"},
            "test": m["test"],
            "best_epoch": m["best_epoch"],
        },
        usage=f'from transformers import pipeline\ntagger = pipeline("token-classification", model="{args.out}", '
        'aggregation_strategy="first")\ntagger("Naloxone reverses the antihypertensive effect of clonidine.")',
    )
    write_curves(result.log_history, args.plots, CURVES)
    write_json(args.metrics, result.metrics)
    print(
        f"finetune_ner {args.dataset} ({args.model}): best epoch {m['best_epoch']}, dev F1 {m['dev']['f1']:.4f}, "
        f"test F1 {m['test']['f1']:.4f} ({m['wall_seconds']:.0f} s)"
    )


if __name__ == "__main__":
    sys.exit(run_stage(main))
