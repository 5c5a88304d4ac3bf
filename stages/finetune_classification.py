"""Stage finetune_classification: fine-tune one model arm on one prepared classification dataset of
the catalogue (SciCite citation intent by default); choose the epoch on dev (macro-F1), score test
once; save the model, test predictions, metrics, confusion data, curves.

Usage: python stages/finetune_classification.py --data data/prepared/scicite --model models/adapted \\
           --out models/finetune_classification/scicite/adapted \\
           --metrics metrics/finetune_classification/scicite/adapted.json \\
           --plots plots/finetune_classification/scicite/adapted \\
           --checkpoints models/finetune_checkpoints/classification/scicite/adapted

A checkpoint is written at every epoch end into --checkpoints (kept across runs, outside DVC's
outputs); an interrupted run resumes from the newest complete one of the same params, data, base
model and code, and a finished one is restored from its last, not trained further.
"""

from __future__ import annotations

import sys

from minisci.cards import eval_result, example_text
from minisci.config import FinetuneClassificationConfig, load_section
from minisci.data.readers import load_prepared
from minisci.finetune.classification import run_finetune_classification
from minisci.finetune.common import SeedWorkers, publish, stage_arguments
from minisci.pretrain.seeds import load_seed_design
from minisci.stage import description, run_stage

CURVES = ("loss", "learning_rate", "dev_macro_f1", "dev_accuracy")


def main(argv: list[str] | None = None) -> None:
    args = stage_arguments(description(__doc__)).parse_args(argv)
    cfg = load_section(FinetuneClassificationConfig, "finetune_classification", args.params)
    workers = SeedWorkers.of_stage(args, __file__, argv)
    design = load_seed_design(args.params)
    result = run_finetune_classification(args.data, args.model, cfg, args.checkpoints, design, workers)
    if result is None:  # a worker process of seed_processes: its seed's result is written
        return
    m = result.metrics
    subset = m.get("eval_subsets", {}).get("test")  # max_eval_examples scored a subset of test
    example = example_text([e.text for e in load_prepared(args.data, "classification", ("test",)).splits["test"]])
    card = dict(
        title=f"minisci text classification: {m['dataset']} ({result.encoder})",
        summary=f"Sequence classification ({', '.join(m['labels'])}) fine-tuned from `{result.encoder}`; epoch "
        f"{m['best_epoch']} chosen on dev macro-F1, test scored once"
        + (f" (on a seeded subset of {subset['examples']} of {subset['of']} test examples)" if subset else "")
        + ". `test_predictions.jsonl` holds the test predictions.",
        base=str(result.encoder),
        data=f"{m['dataset']} train (dev for model selection), prepared in {args.data}",
        params={"finetune_classification": cfg.result_params()},
        metrics={
            "dev": {k: m["dev"][k] for k in ("accuracy", "macro_f1")},
            "test": {k: m["test"][k] for k in ("accuracy", "macro_f1", "per_class")},
            "best_epoch": m["best_epoch"],
        },
        usage=f'from transformers import pipeline\nclassify = pipeline("text-classification", model="{args.out}")\n'
        f'classify("{example}")',
        pipeline_tag="text-classification",
        datasets=[m["dataset"]],
        results=[
            eval_result("text-classification", m["dataset"], k, m["test"][k], subset=subset)
            for k in ("accuracy", "macro_f1", "micro_f1")
        ],
    )
    # One row per test example, for DVC's confusion-matrix template.
    confusion = [{"actual": r["gold"], "predicted": r["pred"]} for r in result.test_predictions]
    publish(result, args, CURVES, card, plots={"confusion.json": confusion})
    print(
        f"finetune_classification {m['dataset']} (from {args.model}): best epoch {m['best_epoch']}, "
        f"dev macro-F1 {m['dev']['macro_f1']:.4f}, test accuracy {m['test']['accuracy']:.4f}, "
        f"macro-F1 {m['test']['macro_f1']:.4f} ({m['wall_seconds']:.0f} s) -> {args.out}"
    )


if __name__ == "__main__":
    sys.exit(run_stage(main))
