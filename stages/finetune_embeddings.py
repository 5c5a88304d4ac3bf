"""Stage finetune_embeddings: contrastive fine-tuning (MultipleNegativesRankingLoss, mean pooling,
BM25 hard negatives) of the shipped and the adapted encoder into sentence-embedding models on
title <-> abstract pairs of the corpora of the corpus catalogue (data/corpora.yaml); a retrieval
benchmark (title and sentence queries among thousands of documents) with verdicts against the base model as shipped,
BM25 and each other. Saves the encoder that is better on dev.

Usage: python stages/finetune_embeddings.py --docs data/corpus/documents.jsonl \\
           --adapted models/adapted/13 --baseline models/baseline --out models/embeddings \\
           --metrics metrics/finetune_embeddings.json --plots plots/finetune_embeddings \\
           --checkpoints models/finetune_checkpoints/embeddings

Training is seeded, so a forced rerun trains the same model; it keeps the metrics of the first run
with those inputs (timings included: kept in --checkpoints), so nothing downstream becomes stale.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

from minisci.cards import eval_result, write_model_card
from minisci.config import CORPORA_FILE, FinetuneEmbeddingsConfig, load_corpora, load_section
from minisci.finetune.embeddings import (
    RETRIEVAL_FILE,
    curve_history,
    run_finetune_embeddings,
    served_summary,
    tuned_name,
)
from minisci.fingerprint import model_content_hash
from minisci.io import atomic_path, sha256_file, write_json
from minisci.report.retrieval import SHIPPED
from minisci.stage import description, run_stage
from minisci.training import keep_run_metrics, run_metrics_store, write_curves


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=description(__doc__))
    p.add_argument("--docs", required=True, help="documents.jsonl from sample_corpus (which documents may be used)")
    p.add_argument("--adapted", required=True, help="the adapted encoder (a starting point)")
    p.add_argument("--baseline", required=True, help="the base model as shipped: the reference and a starting point")
    p.add_argument("--out", required=True)
    p.add_argument("--metrics", required=True)
    p.add_argument("--plots", required=True)
    p.add_argument("--checkpoints", required=True, help="folder kept across runs: the metrics of the run")
    p.add_argument("--params", default="params.yaml")
    p.add_argument(
        "--corpora-catalogue", default=CORPORA_FILE, help=f"the pretraining corpus catalogue (default {CORPORA_FILE})"
    )
    args = p.parse_args(argv)

    cfg = load_section(FinetuneEmbeddingsConfig, "finetune_embeddings", args.params)
    corpora = load_corpora(args.corpora_catalogue)
    with tempfile.TemporaryDirectory(prefix="finetune_embeddings.") as work:
        model, metrics, history = run_finetune_embeddings(corpora, args.docs, args.adapted, args.baseline, cfg, work)
        served = metrics["served"]
        with atomic_path(args.out) as out:
            model.save(str(out))
            write_json(out / RETRIEVAL_FILE, served)  # what `minisci index` serves by default
            # Our card replaces sentence-transformers' own, whose template text ("Base model: Unknown",
            # SentenceTransformer("sentence_transformers_model_id")) is wrong for this model.
            write_model_card(
                out,
                title="minisci sentence embeddings",
                summary=served_summary(served["encoder"], metrics["starts"]),
                base=args.baseline if served["encoder"] == SHIPPED else getattr(args, metrics["start_encoder"]),
                data=f"{metrics['train_pairs']} title/abstract pairs from the corpora {', '.join(corpora)}",
                params={"finetune_embeddings": dataclasses.asdict(cfg)},
                metrics={k: metrics[k] for k in ("starts", "start_encoder", "served", "test")},
                usage=f'from sentence_transformers import SentenceTransformer\nmodel = SentenceTransformer("{args.out}")\n'
                'model.encode(["kinase inhibitors in leukaemia"])  # the evaluated vectors up to '
                f"{cfg.eval_max_length} word pieces\n# longer texts are windowed by: minisci index --model {args.out} ...",
                results=[
                    eval_result(
                        "sentence-similarity", f"minisci-retrieval-{kind}", k, per[served["encoder"]][k], "test"
                    )
                    for kind, per in metrics["test"].items()
                    for k in ("mrr_at_10", "recall_at_1", "recall_at_10")
                ],
                pipeline_tag="sentence-similarity",
                library_name="sentence-transformers",
                tags=["sentence-transformers", "feature-extraction"],
            )
    inputs = [model_content_hash(Path(d)) for d in (args.adapted, args.baseline)] + [sha256_file(args.docs)]
    metrics = keep_run_metrics(metrics, run_metrics_store(args.checkpoints, dataclasses.asdict(cfg), *inputs))
    write_curves(
        curve_history(history), args.plots, ("learning_rate", *(f"loss_{tuned_name(s)}" for s in metrics["starts"]))
    )
    write_json(args.metrics, metrics)
    for kind, per in metrics["test"].items():
        print(
            f"finetune_embeddings: {kind} MRR@10 "
            + ", ".join(f"{system} {r['mrr_at_10']:.3f}" for system, r in per.items())
        )
    print(f"finetune_embeddings: serving {served['encoder']} with the {served['retriever']} retriever -> {args.out}")


if __name__ == "__main__":
    sys.exit(run_stage(main))
