"""Stage prepare_data: read one dataset of the catalogue (data/datasets.yaml) as declared,
check it, and write its normalised splits (IOB2 NER sentences or labelled texts) and dataset.json.

Usage: python stages/prepare_data.py --dataset bc5cdr --data data/raw/ner/bc5cdr --out data/prepared/bc5cdr

One DVC stage per catalogue entry (``prepare_data@<name>``); --data is the entry's ``dir``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from minisci.config import DATASETS_FILE, SPLITS, catalog_entry
from minisci.data.prepare import check_links_stay_inside, prepare_dataset, quality_lines, write_prepared
from minisci.stage import description, run_stage


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=description(__doc__))
    p.add_argument("--dataset", required=True, help="catalogue entry (a key under 'datasets' in the catalogue)")
    p.add_argument("--data", required=True, help="the entry's directory (its 'dir')")
    p.add_argument("--out", required=True, help="directory: train/dev/test.jsonl and dataset.json")
    p.add_argument("--catalogue", default=DATASETS_FILE, help=f"the dataset catalogue (default {DATASETS_FILE})")
    args = p.parse_args(argv)

    cfg = dataclasses.replace(catalog_entry(args.dataset, path=args.catalogue), dir=args.data)
    check_links_stay_inside(cfg, ".")  # run from the repository root, as dvc repro runs it
    rows, meta = prepare_dataset(args.dataset, cfg)
    write_prepared(args.out, rows, meta)
    for line in meta["warnings"] + quality_lines(meta):
        print(f"warning: {args.dataset}: {line}", file=sys.stderr)
    sizes = ", ".join(f"{sp} {len(rows[sp])}" for sp in SPLITS)
    scheme = f", tags {meta['scheme']} ({meta['scheme_declared']})" if "scheme" in meta else ""
    print(f"prepare_data {args.dataset}: {cfg.task}, {sizes}{scheme}, labels {meta['labels']} -> {args.out}")


if __name__ == "__main__":
    sys.exit(run_stage(main))
