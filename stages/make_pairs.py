"""Stage make_pairs: BERT-style next-sentence-prediction pairs (50% IsNext, 50% NotNext) with a
held-out split built from held-out documents. With pretrain.nsp false nothing reads pairs
(pretrain_data packs the documents into blocks), so none are made: a corpus of one-sentence
documents, which has none to make, pretrains too.

Usage: python stages/make_pairs.py --docs data/corpus/documents.jsonl --out data/pairs --metrics metrics/make_pairs.json
"""

from __future__ import annotations

import argparse
import sys
import time

from minisci.config import MakePairsConfig, load_section
from minisci.data.pairs import make_pairs
from minisci.data.readers import iter_sample
from minisci.io import atomic_path, write_json, write_jsonl
from minisci.pretrain.seeds import load_pretrain
from minisci.stage import description, run_stage


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=description(__doc__))
    p.add_argument("--docs", required=True, help="documents.jsonl from sample_corpus")
    p.add_argument("--out", required=True, help="directory: train.jsonl, heldout.jsonl")
    p.add_argument("--metrics", required=True)
    p.add_argument("--params", default="params.yaml")
    args = p.parse_args(argv)

    cfg = load_section(MakePairsConfig, "make_pairs", args.params)
    nsp = load_pretrain(args.params)[0].nsp
    start = time.perf_counter()
    if nsp:
        train, heldout, metrics = make_pairs(args.docs, cfg)
    else:
        n_docs = sum(1 for _ in iter_sample(args.docs))  # the documents are still checked: pretrain_data packs them
        train, heldout = [], []
        metrics = {"pairs_made": False, "documents": n_docs, "train": {"pairs": 0}, "heldout": {"pairs": 0}}
    with atomic_path(args.out) as out:
        out.mkdir()
        write_jsonl(out / "train.jsonl", train)
        write_jsonl(out / "heldout.jsonl", heldout)
    metrics["wall_seconds"] = round(time.perf_counter() - start, 1)
    write_json(args.metrics, metrics)
    if not nsp:
        print(
            f"make_pairs: none made: pretrain.nsp is false, so pretrain_data packs the documents into blocks -> {args.out}"
        )
        return
    print(
        f"make_pairs: {len(train)} train / {len(heldout)} held-out pairs "
        f"(IsNext {metrics['train']['isnext_fraction']:.2%}) -> {args.out}"
    )


if __name__ == "__main__":
    sys.exit(run_stage(main))
