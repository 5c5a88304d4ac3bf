"""Fine-tuning's CPU-side work against the tools users would pick, on the real NER datasets: scoring
dev (minisci's ``minisci.metrics.ner_f1`` against seqeval's own ``classification_report`` in strict
IOB2 mode) and collating training batches (minisci's ``minisci.batching.PadCollator`` against
transformers' ``DataCollatorForTokenClassification``).

Usage: python benchmarks/finetune_cpu_side.py [--datasets bc5cdr jnlpba ...] [--repeats 3] [--batch-size 128]

On a GPU a fine-tuning step is small, and this is CPU work the GPU waits for: a stage scores dev at
every epoch end and collates every batch. For each prepared NER dataset (``dvc repro prepare_data``):

* scoring: the prediction is the dev gold with one tag in ten replaced by a random tag of the dataset
  and repaired to IOB2 (as the stages repair theirs; seeded). Both scorers get the same sequences and
  must give identical reports (minisci takes seqeval's arithmetic and reads the same entities in one
  pass).
* collating: the training windows as the stage encodes them (labels on each word's first piece,
  the base model's tokenizer, ``--model``), cut into consecutive batches of --batch-size (the paper
  profile's 128); both collators must give identical tensors.

The best of --repeats is timed. Prints each side's seconds and the ratio per dataset, and last the
smallest ratio of each.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import HelpFormatter, positive_int, print_machine  # noqa: E402

from minisci.errors import MinisciError  # noqa: E402
from minisci.stage import run_command  # noqa: E402

REPO = Path(__file__).resolve().parents[1]  # default inputs are this checkout's, from any folder
DEFAULT = ["bc5cdr", "bc5cdr_typed", "ncbi_disease", "jnlpba"]


def best_of(repeats: int, fn, *args):
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn(*args)
        times.append(time.perf_counter() - start)
    return min(times), out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    p.add_argument("--datasets", nargs="+", default=DEFAULT, help="prepared NER datasets, by folder name")
    p.add_argument("--prepared", default=str(REPO / "data/prepared"), help="the prepared datasets' folder")
    p.add_argument("--repeats", type=positive_int, default=3, help="times each side runs; the best is timed")
    p.add_argument("--batch-size", type=positive_int, default=128, help="training windows per collated batch")
    p.add_argument(
        "--model", default=str(REPO / "models/baseline"), help="whose tokenizer encodes the training windows"
    )
    args = p.parse_args(argv)
    import torch
    from seqeval.metrics import classification_report
    from seqeval.scheme import IOB2
    from transformers import AutoTokenizer, DataCollatorForTokenClassification

    from minisci.batching import PadCollator
    from minisci.data.readers import load_prepared, to_iob2
    from minisci.metrics.scores import strict_report
    from minisci.tasks.ner import IGNORE, training_features

    if not (Path(args.model) / "tokenizer_config.json").is_file():
        raise MinisciError(f"{args.model}: no tokenizer there (run: dvc repro base_model, or give --model)")
    tokenizer = AutoTokenizer.from_pretrained(args.model, local_files_only=True, trust_remote_code=False)
    print_machine()
    ratios, collating = [], []
    for name in args.datasets:
        folder = Path(args.prepared) / name
        if not (folder / "dataset.json").is_file():
            raise MinisciError(f"{folder}: not a prepared dataset (run: dvc repro prepare_data)")
        data = load_prepared(folder, splits=("train", "dev"))
        gold = [list(s.tags) for s in data.splits["dev"]]
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
        label2id = {t: i for i, t in enumerate(sorted({t for s in data.splits["train"] for t in s.tags}))}
        feats = training_features(data.splits["train"], tokenizer, label2id, 512)
        batches = [feats[i : i + args.batch_size] for i in range(0, len(feats), args.batch_size)]
        stock, mine = DataCollatorForTokenClassification(tokenizer), PadCollator(tokenizer, label_pad=IGNORE)
        theirs, want = best_of(args.repeats, lambda: [stock(b) for b in batches])
        ours, got = best_of(args.repeats, lambda: [mine(b) for b in batches])
        identical = all(set(g) == set(w) and all(torch.equal(g[k], w[k]) for k in g) for g, w in zip(got, want))
        collating.append(theirs / ours)
        print(
            f"{name} train ({len(feats)} windows, {len(batches)} batches of {args.batch_size}): "
            f"transformers {theirs:.3f} s | ours {ours:.3f} s | ratio {theirs / ours:.2f}x | identical tensors: "
            f"{'yes' if identical else 'NO'}"
        )
        if not identical:
            raise MinisciError(f"{name}: minisci's batches differ from transformers'")
    print(f"ner scoring, ours / seqeval classification_report, identical reports: {min(ratios):.2f}x (smallest)")
    print(
        f"collating, ours / transformers DataCollatorForTokenClassification, identical tensors: {min(collating):.2f}x (smallest)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(run_command(main))  # a missing prepared dataset: one line, exit 1
