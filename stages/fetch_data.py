"""Stage fetch_data: copy every dataset file in the manifest from an offline mirror (nothing is
downloaded), verify sha256, and publish the tree atomically.

Usage: python stages/fetch_data.py --manifest data/manifest.tsv --out data/raw [--params params.yaml]

The mirror is ``fetch_data.mirror`` in params.yaml; the environment variable MINISCI_DATA_MIRROR
overrides it (read here only). A relative mirror is taken from the repository root, also under
``dvc exp run --temp`` and ``--queue``, whose temporary workspaces lie elsewhere. The mirror location
is deliberately not a DVC param: the files are identified by their checksums, so moving the mirror
must not invalidate the pipeline.
"""

from __future__ import annotations

import argparse
import os
import sys

from minisci.config import FetchDataConfig, load_section
from minisci.data.fetch import fetch_all, read_manifest
from minisci.pretrain.model import repo_path
from minisci.stage import description, run_stage

ENV_MIRROR = "MINISCI_DATA_MIRROR"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=description(__doc__))
    p.add_argument("--manifest", required=True, help="TSV: path, bytes, sha256, url")
    p.add_argument("--out", required=True, help="directory to create (replaced atomically)")
    p.add_argument("--params", default="params.yaml")
    args = p.parse_args(argv)

    cfg = load_section(FetchDataConfig, "fetch_data", args.params)
    mirror = os.environ.get(ENV_MIRROR) or cfg.mirror
    option = ENV_MIRROR if os.environ.get(ENV_MIRROR) else f"{args.params}: fetch_data.mirror"
    warnings: list[str] = []
    stats = fetch_all(read_manifest(args.manifest, warnings), mirror and repo_path(mirror), args.out, option=option)
    for line in warnings:
        print(f"warning: {line}", file=sys.stderr)
    repeated = f"; {len(warnings)} repeated manifest line(s) skipped" if warnings else ""
    print(
        f"fetch_data: {stats['files']} files, {stats['bytes']:,} bytes verified (from {mirror}){repeated} -> {args.out}"
    )


if __name__ == "__main__":
    sys.exit(run_stage(main))
