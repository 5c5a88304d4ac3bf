"""Stage finetune_ner: fine-tune one model arm on one prepared NER dataset of the catalogue; choose
the epoch on dev (entity F1), score test once; save the model, test predictions, metrics, curves.

Usage: python stages/finetune_ner.py --data data/prepared/bc5cdr --model models/adapted \\
           --out models/finetune_ner/bc5cdr/adapted --metrics metrics/finetune_ner/bc5cdr/adapted.json \\
           --plots plots/finetune_ner/bc5cdr/adapted --checkpoints models/finetune_checkpoints/ner/bc5cdr/adapted

A checkpoint is written at every epoch end into --checkpoints (kept across runs, outside DVC's
outputs); an interrupted run resumes from the newest complete one of the same params, data, base
model and code, and a finished one is restored from its last, not trained further.
"""

from __future__ import annotations

import sys

from minisci.cards import eval_result, example_sentence, ner_usage
from minisci.config import FinetuneNerConfig, load_section
from minisci.finetune.common import SeedWorkers, publish, stage_arguments
from minisci.finetune.ner import run_finetune_ner
from minisci.pretrain.seeds import load_seed_design
from minisci.stage import description, run_stage

CURVES = ("loss", "learning_rate", "dev_f1", "dev_precision", "dev_recall")


def main(argv: list[str] | None = None) -> None:
    args = stage_arguments(description(__doc__)).parse_args(argv)
    cfg = load_section(FinetuneNerConfig, "finetune_ner", args.params)
    workers = SeedWorkers.of_stage(args, __file__, argv)
    result = run_finetune_ner(args.data, args.model, cfg, args.checkpoints, load_seed_design(args.params), workers)
    if result is None:  # a worker process of seed_processes: its seed's result is written
        return
    m = result.metrics
    subset = m.get("eval_subsets", {}).get("test")  # max_eval_examples scored a subset of test
    card = dict(
        title=f"minisci NER: {m['dataset']} ({result.encoder})",
        summary=f"Token classification ({', '.join(m['labels'])}) fine-tuned from `{result.encoder}`; epoch {m['best_epoch']} "
        "chosen on dev, test scored once (seqeval, strict IOB2"
        + (f", on a seeded subset of {subset['examples']} of {subset['of']} test sentences" if subset else "")
        + "). `test_predictions.jsonl` holds the test predictions.",
        base=str(result.encoder),
        data=f"{m['dataset']} train (dev for model selection), prepared in {args.data}",
        params={"finetune_ner": cfg.result_params()},
        metrics={
            "dev": {k: v for k, v in m["dev"].items() if k != "per_type"},
            "test": m["test"],
            "best_epoch": m["best_epoch"],
        },
        usage=ner_usage(args.out, cfg.crf, result.tokenizer, example_sentence(result.test_predictions)),
        pipeline_tag="token-classification",
        datasets=[m["dataset"]],
        results=[
            eval_result("token-classification", m["dataset"], k, m["test"][k], subset=subset)
            for k in ("precision", "recall", "f1")
        ]
        + [
            eval_result("token-classification", m["dataset"], "f1", r["f1"], name=f"f1 {t}", subset=subset)
            for t, r in m["test"]["per_type"].items()
        ],
    )
    publish(result, args, CURVES, card)
    print(
        f"finetune_ner {m['dataset']} (from {args.model}): best epoch {m['best_epoch']}, dev F1 {m['dev']['f1']:.4f}, "
        f"test F1 {m['test']['f1']:.4f} ({m['wall_seconds']:.0f} s) -> {args.out}"
    )


if __name__ == "__main__":
    sys.exit(run_stage(main))
