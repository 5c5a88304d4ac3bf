"""Long documents: peak memory and wall time of ``sample_corpus`` on a ``txt`` corpus of a fixed
number of files as each file grows, side by side with another checkout of the code (``--before``),
in one run.

Each size is a folder of ``--files`` text files of that many KiB (every file its own text), the only
corpus of the catalogue; the stage runs as its own process, as DVC runs it, on the repository's
params with ``n_docs`` set to ``--n-docs`` (a small sample, so what is measured is the scan of the
corpus, not the sample held). Peak memory is ``corpus_scale.py``'s: the largest sum of the
proportional set sizes of the stage's process and its workers, sampled every 0.25 s, and the
largest single process's RSS. Both codes' samples are compared byte for byte.

Usage: python benchmarks/long_documents.py --before /tmp/old [--files 150] [--sizes-kb 100 1024 4096]
(run from the repository root after ``dvc repro prepare_data``; needs data/prepared)
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus_scale import REPO, measure, print_machine, scratch  # noqa: E402
from machine import HelpFormatter, positive_int  # noqa: E402


def write_corpus(folder: Path, n: int, kb: int, seed: int = 0) -> int:
    """``n`` files of ``kb`` KiB, each one its own text; returns the bytes written."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(5000)]
    paragraph = " ".join(" ".join(rng.choices(vocab, k=12)).capitalize() + "." for _ in range(40))
    folder.mkdir(parents=True)
    body = (paragraph + "\n") * max(1, kb * 1024 // (len(paragraph) + 1))
    for i in range(n):
        (folder / f"doc{i:04d}.txt").write_text(f"Document {i}. {body}", encoding="utf-8")
    return sum(f.stat().st_size for f in folder.iterdir())


def run(code: Path, corpus: Path, out: Path, n_docs: int) -> tuple[float, float, float]:
    out.mkdir(parents=True)
    params = yaml.safe_load((code / "params.yaml").read_text())
    params["sample_corpus"]["n_docs"] = n_docs
    params["sample_corpus"]["tapt_datasets"] = []
    (out / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    catalogue = {"corpora": {"long": {"dir": str(corpus), "format": "txt", "weight": 1.0}}}
    (out / "corpora.yaml").write_text(yaml.safe_dump(catalogue, sort_keys=False))
    cmd = [sys.executable, str(code / "stages/sample_corpus.py"), "--corpus-dirs", str(corpus.parent),
           "--datasets", str(REPO / "data/prepared"), "--catalogue", str(code / "data/datasets.yaml"),
           "--corpora-catalogue", str(out / "corpora.yaml"), "--out", str(out / "corpus"),
           "--metrics", str(out / "sample.json"), "--params", str(out / "params.yaml")]  # fmt: skip
    wall, tree, one, _ = measure(cmd, code, {**os.environ, "PYTHONPATH": str(code / "src")})
    return wall, tree, one


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    p.add_argument("--before", required=True, help="a checkout of the code to compare with (e.g. a git worktree)")
    p.add_argument("--files", type=positive_int, default=150, help="text files per corpus")
    p.add_argument("--sizes-kb", type=positive_int, nargs="+", default=[100, 1024, 4096], help="KiB per file")
    p.add_argument("--n-docs", type=positive_int, default=20, help="sample_corpus.n_docs for the run")
    p.add_argument("--work", default=None, help="scratch folder, kept; without it a temporary one")
    args = p.parse_args(argv)
    if not (Path(args.before) / "stages/sample_corpus.py").is_file():
        p.error(f"--before {args.before}: not a checkout of this repository (no stages/sample_corpus.py)")
    if not (REPO / "data/prepared").is_dir():
        p.error(f"{REPO / 'data/prepared'}: not found (run: dvc repro prepare_data)")
    print_machine()
    with scratch(args.work, "long_documents.") as work:
        work = Path(work)
        print("| files × KiB | corpus MB | before: s, peak PSS MB (largest RSS) | now: s, peak PSS MB (largest RSS) "
              "| PSS now/before | sample |")  # fmt: skip
        print("|---|---|---|---|---|---|")
        for kb in args.sizes_kb:
            corpus = work / f"{kb}" / "corpora" / "long"
            mb = write_corpus(corpus, args.files, kb) / 1e6
            rows = {}
            for label, code in (("before", Path(args.before).resolve()), ("now", REPO)):
                rows[label] = run(code, corpus, work / f"{kb}" / label, args.n_docs)
            same = [(work / f"{kb}" / x / "corpus/documents.jsonl").read_bytes() for x in ("before", "now")]
            (bw, bt, bo), (nw, nt, no) = rows["before"], rows["now"]
            print(
                f"| {args.files} × {kb:,} | {mb:,.0f} | {bw:.1f}, {bt:,.0f} ({bo:,.0f}) | {nw:.1f}, {nt:,.0f} ({no:,.0f}) "
                f"| {nt / bt:.2f} | {'identical' if same[0] == same[1] else 'DIFFERENT'} |",
                flush=True,
            )
            shutil.rmtree(work / f"{kb}")


if __name__ == "__main__":
    main()
