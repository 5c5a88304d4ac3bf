"""Stage finetune_embeddings: contrastive fine-tuning (MultipleNegativesRankingLoss, mean pooling)
of an encoder into a sentence-embedding model on title <-> abstract pairs from the sampled corpus;
title -> abstract retrieval on held-out documents for the baseline, the input encoder and the result.

Usage: python stages/finetune_embeddings.py --data data/raw --docs data/corpus/documents.jsonl \\
           --encoder models/adapted --baseline models/baseline --out models/embeddings \\
           --metrics metrics/finetune_embeddings.json --plots plots/finetune_embeddings \\
           --checkpoints models/finetune_checkpoints/embeddings

Training is seeded, so a forced rerun trains the same model; it keeps the metrics of the first run
with those inputs (timings included: kept in --checkpoints), so nothing downstream becomes stale.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import tempfile
from pathlib import Path

from minisci.cards import eval_result, write_model_card
from minisci.config import FinetuneEmbeddingsConfig, load_section
from minisci.finetune.embeddings import run_finetune_embeddings
from minisci.fingerprint import model_content_hash
from minisci.io import atomic_path, sha256_file, write_json
from minisci.stage import description, run_stage
from minisci.training import keep_run_metrics, run_metrics_store, write_curves


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=description(__doc__))
    p.add_argument("--data", required=True, help="output of fetch_data (pool with titles)")
    p.add_argument("--docs", required=True, help="documents.jsonl from sample_corpus (which documents may be used)")
    p.add_argument("--encoder", required=True, help="encoder to fine-tune")
    p.add_argument("--baseline", required=True, help="shipped base model, evaluated for reference")
    p.add_argument("--out", required=True)
    p.add_argument("--metrics", required=True)
    p.add_argument("--plots", required=True)
    p.add_argument("--checkpoints", required=True, help="folder kept across runs: the metrics of the run")
    p.add_argument("--params", default="params.yaml")
    args = p.parse_args(argv)

    cfg = load_section(FinetuneEmbeddingsConfig, "finetune_embeddings", args.params)
    with tempfile.TemporaryDirectory(prefix="finetune_embeddings.") as work:
        model, metrics, history = run_finetune_embeddings(args.data, args.docs, args.encoder, args.baseline, cfg, work)
        with atomic_path(args.out) as out:
            shutil.copytree(Path(work) / "model", out)
            # Our card replaces sentence-transformers' own, whose template text ("Base model: Unknown",
            # SentenceTransformer("sentence_transformers_model_id")) is wrong for this model.
            write_model_card(
                out,
                title="minisci sentence embeddings",
                summary="Sentence-transformers model (mean pooling) contrastively fine-tuned with in-batch negatives "
                "(MultipleNegativesRankingLoss) on title <-> abstract pairs of the sampled corpus.",
                base=args.encoder,
                data=f"{metrics['train_pairs']} title/abstract pairs from {args.docs}",
                params={"finetune_embeddings": dataclasses.asdict(cfg)},
                metrics=metrics,
                usage=f'from sentence_transformers import SentenceTransformer\nmodel = SentenceTransformer("{args.out}")\n'
                'model.encode(["kinase inhibitors in leukaemia"])\n# or: minisci index --model ' + args.out + " ...",
                results=[
                    eval_result("sentence-similarity", "minisci-title-abstract", k, metrics["finetuned"][k], "heldout")
                    for k in ("mrr_at_10", "recall_at_1", "recall_at_10")
                ],
                pipeline_tag="sentence-similarity",
                library_name="sentence-transformers",
                tags=["sentence-transformers", "feature-extraction"],
            )
    inputs = [model_content_hash(Path(d)) for d in (args.encoder, args.baseline)] + [sha256_file(args.docs)]
    metrics = keep_run_metrics(metrics, run_metrics_store(args.checkpoints, dataclasses.asdict(cfg), *inputs))
    write_curves(history, args.plots, ("loss", "learning_rate"))
    write_json(args.metrics, metrics)
    print(
        f"finetune_embeddings: title->abstract MRR@10 baseline {metrics['baseline']['mrr_at_10']:.3f}, "
        f"encoder {metrics['encoder']['mrr_at_10']:.3f}, fine-tuned {metrics['finetuned']['mrr_at_10']:.3f}"
    )


if __name__ == "__main__":
    sys.exit(run_stage(main))
