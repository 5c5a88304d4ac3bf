"""The ``minisci`` command line: use the trained models.

  minisci ner --model models/finetune_ner/bc5cdr/adapted "Naloxone reverses clonidine."
  minisci cite --model models/finetune_scicite/adapted --file citations.txt --jsonl
  minisci index --model models/adapted --docs papers.jsonl --out index/
  minisci search --index index/ "kinase inhibitors in leukaemia" -k 5
  minisci reviewers --index index/ abstract.txt --exclude "A. Author"

Texts come from arguments, ``--file`` (one text per line) or standard input. Each command parses
options and calls one library function; errors are one line on stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from minisci.errors import MinisciError
from minisci.serve.precision import PRECISIONS


def _texts(args) -> list[str]:
    if args.text:
        return list(args.text)
    src = open(args.file, encoding="utf-8") if args.file else sys.stdin
    with src:
        texts = [line.rstrip("\n") for line in src if line.strip()]
    if not texts:
        raise MinisciError(f"{args.file or 'standard input'}: no text given")
    return texts


def _progress(total: int | None, desc: str, unit: str = "text"):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, disable=None)  # disable=None: only on a terminal


def _emit(rows: list, jsonl: bool, human) -> None:
    for row in rows:
        print(json.dumps(row, ensure_ascii=False) if jsonl else human(row))


def cmd_ner(args) -> None:
    from minisci.serve.inference import tag, token_classifier

    texts = _texts(args)
    pipe = token_classifier(args.model, precision=args.precision)
    with _progress(None, "tagging", unit="window") as bar:
        results = tag(pipe, texts, args.batch_size, progress=bar.update)
    _emit(
        [{"text": t, "entities": e} for t, e in zip(texts, results)],
        args.jsonl,
        lambda r: "\n".join(
            [r["text"]]
            + [f"  {e['start']}-{e['end']}\t{e['entity_group']}\t{e['score']:.3f}\t{e['word']}" for e in r["entities"]]
        ),
    )


def cmd_cite(args) -> None:
    from minisci.serve.inference import classify, text_classifier

    texts = _texts(args)
    pipe = text_classifier(args.model, precision=args.precision)
    with _progress(len(texts), "classifying") as bar:
        results = classify(pipe, texts, args.batch_size, progress=bar.update)
    _emit(
        [{"text": t, **r} for t, r in zip(texts, results)],
        args.jsonl,
        lambda r: f"{r['label']}\t{r['score']:.3f}\t{r['text']}",
    )


def cmd_index(args) -> None:
    from minisci.serve.search import build_index, read_collection

    docs = read_collection(args.docs)
    with _progress(None, "embedding", unit="window") as bar:
        info = build_index(
            args.model,
            docs,
            args.out,
            args.batch_size,
            args.max_length,
            progress=bar.update,
            precision=args.precision,
            max_tokens=args.max_tokens,
        )
    print(
        json.dumps(info)
        if args.jsonl
        else f"indexed {info['documents']} documents ({info['dimension']}-d) -> {args.out}"
    )


def cmd_search(args) -> None:
    from minisci.serve.search import search

    hits = search(args.index, " ".join(args.query), args.k)
    _emit(hits, args.jsonl, lambda h: f"{h['rank']:>3}  {h['score']:.4f}  {h['id']}  {h['title']}")


def cmd_reviewers(args) -> None:
    from minisci.serve.search import recommend_reviewers

    path = Path(args.abstract)
    if not path.is_file():
        raise MinisciError(f"{path}: abstract file not found")
    abstract = path.read_text(encoding="utf-8").strip()
    if not abstract:
        raise MinisciError(f"{path}: empty abstract")
    ranked = recommend_reviewers(args.index, abstract, args.k, tuple(args.exclude), args.aggregation)
    _emit(ranked, args.jsonl, lambda r: f"{r['rank']:>3}  {r['score']:.4f}  {r['author']}  ({', '.join(r['papers'])})")


def add_precision(sp, extra: str = "") -> None:
    sp.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="fp32",
        help="fp32: exactly the transformers pipeline; bf16: encoder matmuls in bfloat16 (about 1.7x faster "
        "on CPUs with native bf16, near-identical output); int8: dynamic quantisation (CPU, fastest, "
        "small accuracy change). See benchmarks/inference_speed.py. " + extra,
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="minisci", description="Use minisci's trained models.")
    sub = p.add_subparsers(dest="command", required=True)

    def add(name, fn, help_):
        sp = sub.add_parser(name, help=help_, description=help_)
        sp.set_defaults(fn=fn)
        sp.add_argument("--jsonl", action="store_true", help="one JSON object per line")
        return sp

    for name, fn, help_ in (
        ("ner", cmd_ner, "tag biomedical entities (character offsets, type, score)"),
        ("cite", cmd_cite, "classify citation intent: background / method / result"),
    ):
        sp = add(name, fn, help_)
        sp.add_argument("text", nargs="*", help="texts (default: --file or standard input, one per line)")
        sp.add_argument("--model", required=True, help="fine-tuned model directory")
        sp.add_argument("--file", help="file with one text per line")
        sp.add_argument("--batch-size", type=int, default=32, help="texts per length-sorted batch")
        add_precision(sp)
    sp = add("index", cmd_index, "embed a JSONL collection (id, title, text, authors) into a search index")
    sp.add_argument("--model", required=True, help="encoder directory (e.g. models/adapted or an embedding model)")
    sp.add_argument("--docs", required=True, help="JSONL documents")
    sp.add_argument("--out", required=True, help="index directory to create")
    sp.add_argument("--batch-size", type=int, default=64, help="windows per batch at most")
    sp.add_argument(
        "--max-tokens",
        type=int,
        default=2048,
        help="padded word pieces per batch at most (small batches of long windows are faster on CPU; raise on a GPU)",
    )
    sp.add_argument("--max-length", type=int, default=256, help="word pieces per window; longer texts are windowed")
    add_precision(sp, "queries to the index use the same precision")
    sp = add("search", cmd_search, "top-k documents of an index for a query, with cosine scores")
    sp.add_argument("query", nargs="+")
    sp.add_argument("--index", required=True)
    sp.add_argument("-k", type=int, default=10)
    sp = add("reviewers", cmd_reviewers, "rank authors of an index by similarity of their papers to an abstract")
    sp.add_argument("abstract", help="file holding the abstract")
    sp.add_argument("--index", required=True)
    sp.add_argument("-k", type=int, default=10)
    sp.add_argument(
        "--exclude", action="append", default=[], help="author to exclude (conflict of interest); repeatable"
    )
    sp.add_argument(
        "--aggregation",
        choices=("max", "mean_top3"),
        default="max",
        help="author score: best paper (max) or mean of the three best papers",
    )
    from minisci.serve.demo import add_demo_parser  # `minisci demo`: its options live beside its launcher

    add_demo_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # e.g. the load report of an encoder saved with pretraining heads
    hf_logging.disable_progress_bar()  # "Loading weights"; our own bars show the work
    try:
        args.fn(args)
    except MinisciError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
