"""Stage sample_corpus: a seeded, deduplicated, contamination-guarded sample of the pretraining
pool at a biomedical/general ratio, split into sentences by Punkt trained on the sample.

Usage: python stages/sample_corpus.py --raw data/raw --datasets data/prepared --out data/corpus \\
           --metrics metrics/sample_corpus.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from minisci.config import SampleCorpusConfig, load_catalog, load_section
from minisci.data.corpus import sample_corpus
from minisci.io import atomic_path, write_json, write_jsonl
from minisci.stage import description, run_stage


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=description(__doc__))
    p.add_argument("--raw", required=True, help="output of fetch_data (the pretraining pools)")
    p.add_argument(
        "--datasets", required=True, help="output of prepare_data: every catalogue dataset's test split is guarded"
    )
    p.add_argument("--out", required=True, help="directory: documents.jsonl, punkt_params.json")
    p.add_argument("--metrics", required=True)
    p.add_argument("--params", default="params.yaml")
    args = p.parse_args(argv)

    cfg = load_section(SampleCorpusConfig, "sample_corpus", args.params)
    names = tuple(load_catalog(args.params))
    start = time.perf_counter()
    rows, punkt, metrics = sample_corpus(args.raw, args.datasets, names, cfg)
    with atomic_path(args.out) as out:
        out.mkdir()
        write_jsonl(out / "documents.jsonl", rows)
        (out / "punkt_params.json").write_text(json.dumps(punkt, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    metrics["wall_seconds"] = round(time.perf_counter() - start, 1)
    write_json(args.metrics, metrics)
    print(
        f"sample_corpus: {metrics['total_docs']} docs, {metrics['total_sentences']} sentences, "
        f"{metrics['total_words']} words; {metrics['excluded_total']} pool docs excluded for test overlap"
    )


if __name__ == "__main__":
    sys.exit(run_stage(main))
