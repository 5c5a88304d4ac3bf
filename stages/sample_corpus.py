"""Stage sample_corpus: a seeded, deduplicated, contamination-guarded sample of the pretraining
corpora of the ``corpora`` catalogue, each at its weight, split into sentences by Punkt trained on
the sample. The corpora are streamed (memory does not grow with their size) over all cores.

Usage: python stages/sample_corpus.py --corpus-dirs data/raw/corpus data/corpora --datasets data/prepared \\
           --out data/corpus --metrics metrics/sample_corpus.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from minisci.config import CORPORA_FILE, DATASETS_FILE, SampleCorpusConfig, load_catalog, load_corpora, load_section
from minisci.data.corpus import check_tracked, sample_corpus
from minisci.io import atomic_path, write_json
from minisci.stage import description, run_stage


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=description(__doc__))
    p.add_argument(
        "--corpus-dirs",
        nargs="+",
        required=True,
        help="the folders this stage depends on in dvc.yaml: every corpus of the catalogue must lie under one",
    )
    p.add_argument(
        "--fetched",
        default="data/raw",
        help="fetch_data's output (default data/raw): a corpus there must be one of the files it copies",
    )
    p.add_argument("--manifest", default="data/manifest.tsv", help="fetch_data's manifest (default data/manifest.tsv)")
    p.add_argument(
        "--datasets", required=True, help="output of prepare_data: every catalogue dataset's test split is guarded"
    )
    p.add_argument("--out", required=True, help="directory: documents.jsonl, punkt_params.json")
    p.add_argument("--metrics", required=True)
    p.add_argument("--params", default="params.yaml")
    p.add_argument("--catalogue", default=DATASETS_FILE, help=f"the dataset catalogue (default {DATASETS_FILE})")
    p.add_argument(
        "--corpora-catalogue", default=CORPORA_FILE, help=f"the pretraining corpus catalogue (default {CORPORA_FILE})"
    )
    p.add_argument(
        "--num-proc",
        type=int,
        default=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        help="worker processes for the scan and the sentence split (default: every core; results do not depend on it)",
    )
    args = p.parse_args(argv)

    cfg = load_section(SampleCorpusConfig, "sample_corpus", args.params)
    corpora = load_corpora(args.corpora_catalogue)
    check_tracked(corpora, args.corpus_dirs, args.fetched, args.manifest, args.corpora_catalogue)
    names = tuple(load_catalog(args.catalogue))
    start = time.perf_counter()
    with atomic_path(args.out) as out:
        out.mkdir()
        punkt, metrics = sample_corpus(corpora, args.datasets, names, cfg, out, num_proc=args.num_proc)
        (out / "punkt_params.json").write_text(json.dumps(punkt, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    metrics["wall_seconds"] = round(time.perf_counter() - start, 1)
    write_json(args.metrics, metrics)
    print(
        f"sample_corpus: {metrics['total_docs']} docs, {metrics['total_sentences']} sentences, "
        f"{metrics['total_words']} words; {metrics['excluded_total']} pool docs excluded for test overlap"
    )


if __name__ == "__main__":
    sys.exit(run_stage(main))
