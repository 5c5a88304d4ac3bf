"""Entity-level NER scoring: minisci's (``minisci.metrics.ner_f1``) against seqeval's own
``classification_report`` in strict IOB2 mode, the scorer users would pick, on the real dev sets.

Usage: python benchmarks/ner_scoring.py [--datasets bc5cdr jnlpba ...] [--repeats 3]

A fine-tuning stage scores dev at every epoch end, and on a GPU that scoring is CPU-side work the
GPU waits for. For each prepared NER dataset (``dvc repro prepare_data``), the prediction scored is
the dev gold with one tag in ten replaced by a random tag of the dataset and repaired to IOB2 (as the
stages repair theirs; seeded). Both scorers get the same sequences; the best of --repeats is timed.
Prints each one's seconds, the ratio, and whether the reports are identical (they must be: minisci
takes seqeval's arithmetic and reads the same entities in one pass), and last the smallest ratio.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import print_machine  # noqa: E402

from minisci.errors import MinisciError  # noqa: E402
from minisci.stage import run_command  # noqa: E402

DEFAULT = ["bc5cdr", "bc5cdr_typed", "ncbi_disease", "jnlpba"]


def best_of(repeats: int, fn, *args):
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn(*args)
        times.append(time.perf_counter() - start)
    return min(times), out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", nargs="+", default=DEFAULT)
    p.add_argument("--prepared", default="data/prepared", help="the prepared datasets' folder")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error("--repeats must be >= 1")
    from seqeval.metrics import classification_report
    from seqeval.scheme import IOB2

    from minisci.data.readers import load_prepared, to_iob2
    from minisci.metrics.ner_f1 import strict_report

    print_machine()
    ratios = []
    for name in args.datasets:
        folder = Path(args.prepared) / name
        if not (folder / "dataset.json").is_file():
            raise MinisciError(f"{folder}: not a prepared dataset (run: dvc repro prepare_data)")
        gold = [list(s.tags) for s in load_prepared(folder, splits=("dev",)).splits["dev"]]
        tags = sorted({t for g in gold for t in g})
        rng = random.Random(0)
        pred = [list(to_iob2([t if rng.random() < 0.9 else rng.choice(tags) for t in g])) for g in gold]
        theirs, want = best_of(
            args.repeats,
            lambda: classification_report(gold, pred, mode="strict", scheme=IOB2, output_dict=True, zero_division=0),
        )
        ours, got = best_of(args.repeats, strict_report, gold, pred)
        ratios.append(theirs / ours)
        print(
            f"{name} dev ({len(gold)} sentences, {sum(map(len, gold))} tags): seqeval {theirs:.3f} s | "
            f"ours {ours:.3f} s | ratio {theirs / ours:.2f}x | identical report: {'yes' if got == want else 'NO'}"
        )
        if got != want:
            raise MinisciError(f"{name}: minisci's report differs from seqeval's")
    print(f"ner scoring, ours / seqeval classification_report, identical reports: {min(ratios):.2f}x (smallest)")
    return 0


if __name__ == "__main__":
    sys.exit(run_command(main))  # a missing prepared dataset: one line, exit 1
