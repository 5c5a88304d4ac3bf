"""The ``minisci`` command line: use the trained models.

  minisci ner --model models/finetune_ner/bc5cdr/adapted "Naloxone reverses clonidine."
  minisci cite --model models/finetune_classification/scicite/adapted --file citations.txt --jsonl
  minisci index --model models/adapted/13 --docs papers.jsonl --out index/
  minisci search --index index/ "kinase inhibitors in leukaemia" -k 5
  minisci reviewers --index index/ abstract.txt --exclude "A. Author"

Texts come from arguments, ``--file`` (one text per line) or standard input. Each command parses
options and calls one library function. Every failure is one line on stderr, no traceback: exit code 2
for a bad option (argparse), 1 for bad input (a file, a model or an index that does not fit).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import warnings
from pathlib import Path

from minisci.errors import DataFormatError, MinisciError
from minisci.serve.checks import at_least, author_name, input_name
from minisci.serve.models import DEVICES, PRECISIONS  # torch-free: `minisci --help` imports no torch
from minisci.stage import run_command
from minisci.tasks.classification import CLASSIFICATION
from minisci.tasks.ner import NER

# ANSI/VT escape sequences (CSI, OSC, two-character) and the remaining C0/C1 control characters
CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]|[\x00-\x1f\x7f-\x9f]")


def clean(text) -> str:
    """Text safe for a terminal: a title in an index cannot move the cursor or recolour the screen."""
    return CONTROL.sub(" ", str(text))


def read_text(path: str | None) -> str:
    """A UTF-8 file (standard input for None or ``-``); bad bytes are an error with line and byte offset.
    Not only a regular file: a pipe (``<(...)``, a FIFO) or a device such as ``/dev/stdin`` is read too."""
    path = None if path == "-" else path
    name = input_name(path)
    if path is not None:
        p = Path(path)
        if p.is_dir():
            raise MinisciError(f"{p}: is a directory, expected a text file")
        if not p.exists():
            raise MinisciError(f"{p}: no such file")
        data = p.read_bytes()
    else:
        stream = getattr(sys.stdin, "buffer", None)
        if stream is None:  # a text stream (tests, IDEs): already decoded
            return sys.stdin.read()
        data = stream.read()
    try:
        return data.decode("utf-8").removeprefix("\ufeff")  # a byte-order mark is not text
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise DataFormatError(
            name, line, f"not UTF-8 (byte offset {e.start}: {data[e.start : e.start + 1]!r})"
        ) from None


def _texts(args) -> list[str]:
    """The texts to run on: the arguments; a lone ``-`` argument, ``--file -`` or neither is standard
    input; ``--file`` a file, one text per line (blank lines skipped). Texts and ``--file`` together are
    a usage error, not one of them silently dropped."""
    stdin = args.text == ["-"]  # as cat, grep and sort read it
    if args.text and args.file is not None:  # bad usage, as argparse's own errors (exit code 2)
        args.usage_error("give texts or --file, not both")
    if args.text and not stdin:
        return list(args.text)
    source = None if stdin else args.file
    # lines end at "\n" (or "\r\n") only: str.splitlines would also cut a text at U+2028, \x0c or \x85
    texts = [line.removesuffix("\r") for line in read_text(source).split("\n") if line.strip()]
    if not texts:
        raise MinisciError(f"{input_name(source)}: no text given")
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
    pipe = token_classifier(
        args.model, stride=args.stride, precision=args.precision, device=args.device, backend=args.backend
    )
    with _progress(None, "tagging", unit="window") as bar:
        results = tag(pipe, texts, args.batch_size, progress=bar.update)
    _emit(
        [{"text": t, "entities": e} for t, e in zip(texts, results)],
        args.jsonl,
        lambda r: "\n".join(
            [clean(r["text"])]
            + [
                f"  {e['start']}-{e['end']}\t{clean(e['entity_group'])}\t{e['score']:.3f}\t{clean(r['text'][e['start'] : e['end']])}"
                for e in r["entities"]
            ]
        ),
    )


def cmd_cite(args) -> None:
    from minisci.serve.inference import classify, text_classifier

    texts = _texts(args)
    pipe = text_classifier(args.model, precision=args.precision, device=args.device, backend=args.backend)
    cut: list[tuple[int, int]] = []
    with _progress(len(texts), "classifying") as bar:
        results = classify(pipe, texts, args.batch_size, progress=bar.update, cut=cut)
    if cut:  # classified on their first window only: say so, not silently
        shown = ", ".join(str(i + 1) for i, _ in cut[:5]) + (f" and {len(cut) - 5} more" if len(cut) > 5 else "")
        print(
            f"warning: {len(cut)} text{'s' * (len(cut) != 1)} ({shown}) longer than the model takes: classified "
            f"on {'their' if len(cut) != 1 else 'its'} first {cut[0][1]} word pieces only (special tokens included)",
            file=sys.stderr,
        )
    _emit(
        [{"text": t, **r} for t, r in zip(texts, results)],
        args.jsonl,
        lambda r: f"{clean(r['label'])}\t{r['score']:.3f}\t{clean(r['text'])}",
    )


def _check_encoder_option(args) -> None:
    """``--model`` of index, search and reviewers names an encoder, not a fine-tuned task model: refused
    before any document or model is read, in one line naming the option."""
    from minisci.serve.models import check_encoder, read_config

    if args.model is None:  # search and reviewers: the index's own encoder, checked as it loads
        return
    try:
        check_encoder(args.model, read_config(args.model))
    except MinisciError as e:
        raise MinisciError(f"minisci {args.command} --model: {e}") from None


def cmd_index(args) -> None:
    from minisci.serve.search import build_index, check_out_dir, describe_encoder, duplicate_warning, read_collection

    _check_encoder_option(args)
    check_out_dir(args.out)  # before the slow part
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
            device=args.device,
            retriever=args.retriever,
        )
    print(f"minisci index: {clean(describe_encoder(args.model))}", file=sys.stderr)  # once the options are checked
    if info["duplicate_ids"]:
        print(f"warning: {input_name(args.docs)}: {duplicate_warning(info['duplicate_ids'])}", file=sys.stderr)
    print(
        json.dumps(info)
        if args.jsonl
        else f"indexed {info['documents']} document{'s' * (info['documents'] != 1)} ({info['dimension']}-d, "
        f"{info['retriever']} retriever) -> {clean(args.out)}"
    )


def cmd_search(args) -> None:
    from minisci.serve.search import search

    _check_encoder_option(args)
    query = read_text(None).strip() if args.query == ["-"] else " ".join(args.query)  # "-": standard input, as ner
    hits = search(args.index, query, args.k, device=args.device, model=args.model)
    if not hits:  # only the bm25 retriever leaves documents out: those that share no word with the query
        print(
            "minisci search: no document shares a word with the query (the index's retriever is bm25)", file=sys.stderr
        )
    _emit(hits, args.jsonl, lambda h: f"{h['rank']:>3}  {h['score']:.4f}  {clean(h['id'])}  {clean(h['title'])}")


def cmd_reviewers(args) -> None:
    from minisci.serve.search import recommend_reviewers

    _check_encoder_option(args)
    abstract = read_text(args.abstract).strip()
    if not abstract:
        raise MinisciError(f"{'standard input' if args.abstract == '-' else args.abstract}: empty abstract")
    ranked = recommend_reviewers(
        args.index, abstract, args.k, tuple(args.exclude), args.aggregation, device=args.device, model=args.model
    )
    if not ranked:
        from minisci.serve.search import load_index, why_no_reviewers

        blame, reason = why_no_reviewers(load_index(args.index)[1], args.exclude)
        if blame != "abstract":
            raise MinisciError(f"{args.index if blame == 'index' else '--exclude'}: {reason}")
        print(f"minisci reviewers: {reason}", file=sys.stderr)  # no match is an answer, as for search
    _emit(
        ranked,
        args.jsonl,
        lambda r: f"{r['rank']:>3}  {r['score']:.4f}  {clean(r['author'])}  ({clean(', '.join(r['papers']))})",
    )


# Options ----------------------------------------------------------------------------------------------


class Parser(argparse.ArgumentParser):
    """Bad options in one line too (argparse would print the whole usage first); exit code 2."""

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {message} (see `{self.prog} --help`)\n")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Defaults shown after every option that has one; examples (the epilog) printed as written."""

    def _get_help_string(self, action) -> str:
        text = action.help or ""
        if action.default not in (None, False, [], argparse.SUPPRESS) and action.option_strings:
            text += " (default: %(default)s)"
        return text


EXAMPLES = {
    "ner": """examples:
  minisci ner --model models/finetune_ner/bc5cdr/adapted "Naloxone reverses clonidine."
  minisci ner --model models/finetune_ner/bc5cdr/adapted --file abstracts.txt --jsonl""",
    "cite": """examples:
  minisci cite --model models/finetune_classification/scicite/adapted "We used the protocol of Smith et al. (2001)."
  cat citations.txt | minisci cite --model models/finetune_classification/scicite/adapted --jsonl""",
    "index": """example:
  minisci index --model models/embeddings --docs tests/fixtures/papers.jsonl --out /tmp/papers-index""",
    "search": '''example:
  minisci search --index /tmp/papers-index -k 3 "antibiotic resistance in hospital infections"''',
    "reviewers": '''example:
  minisci reviewers --index /tmp/papers-index tests/fixtures/abstract.txt -k 4 --exclude "Eva Schmidt"''',
}


# --precision: what fp32 means for each command's output; bf16 and int8 trade the same way for all three
PRECISION_FP32 = {
    NER.command: "fp32: full precision, the entities of the transformers pipeline exactly, except that a CRF head "
    "decodes with Viterbi as its training stage scored it",
    CLASSIFICATION.command: "fp32: full precision, the labels and scores of the transformers text-classification "
    "pipeline exactly",
    "index": "precision of the encoder that embeds the documents, recorded in the index: its queries are embedded the "
    "same way. fp32: full precision",
}
PRECISION_TRADES = (
    "; bf16: encoder matrix products in bfloat16 (faster on GPUs and CPUs with native bf16 products, near-identical "
    "output; a warning says when the CPU runs it slower); int8: dynamic quantisation (CPU, fastest, small accuracy "
    "change). See benchmarks/inference_speed.py."
)


def add_precision(sp, command: str) -> None:
    sp.add_argument("--precision", choices=PRECISIONS, default="fp32", help=PRECISION_FP32[command] + PRECISION_TRADES)


def add_device(sp) -> None:
    sp.add_argument("--device", choices=DEVICES, default="auto", help="where the model runs; auto: CUDA if available")


def build_parser() -> argparse.ArgumentParser:
    from minisci import __version__

    p = Parser(
        prog="minisci",
        description="Use minisci's trained models: tag entities, classify citations, search papers, find reviewers.",
        epilog=EXAMPLES_ALL,
        formatter_class=HelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"minisci {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name, fn, help_):
        sp = sub.add_parser(name, help=help_, description=help_, epilog=EXAMPLES[name], formatter_class=HelpFormatter)
        sp.set_defaults(fn=fn)
        sp.add_argument("--jsonl", action="store_true", help="one JSON object per line")
        add_device(sp)
        return sp

    for name, fn, help_ in (
        (NER.command, cmd_ner, "tag biomedical entities (character offsets, type, score)"),
        (CLASSIFICATION.command, cmd_cite, "classify citation intent: background / method / result"),
    ):
        sp = add(name, fn, help_)
        sp.add_argument(
            "text",
            nargs="*",
            help="texts, each argument one text; none, or a lone -, reads them from standard input, one per line "
            "(a - among other texts is the text '-')",
        )
        sp.add_argument("--model", required=True, help="fine-tuned model directory")
        sp.add_argument(
            "--file",
            help="UTF-8 file with one text per line, blank lines skipped (--file -: standard input); not together "
            "with texts",
        )
        sp.add_argument("--batch-size", type=at_least(1), default=32, help="texts per length-sorted batch")
        if fn is cmd_ner:  # only the tagger windows long texts
            sp.add_argument(
                "--stride",
                type=at_least(0),
                help="word pieces of overlap between the windows of a text longer than the model takes "
                "(default: 64, or half a window for a model with fewer positions)",
            )
        add_precision(sp, name)
        sp.add_argument(
            "--backend",
            choices=("torch", "onnx"),
            default="torch",
            help="torch: PyTorch; onnx: ONNX Runtime on CPU (fp32 or int8; exported once into $MINISCI_CACHE/onnx, "
            "default $XDG_CACHE_HOME/minisci/onnx or ~/.cache/minisci/onnx), faster for NER on CPUs measured so far "
            "(benchmarks/inference_speed.py)",
        )
    sp = add("index", cmd_index, "embed a JSONL collection (id, title, text, authors) into a search index")
    sp.add_argument(
        "--model",
        default="models/embeddings",
        help="encoder directory: a sentence-transformers model (its own pooling) or a plain encoder (mean-pooled); "
        "the default is the encoder finetune_embeddings found better on its dev queries",
    )
    sp.add_argument(
        "--docs", required=True, help="JSONL documents (-: standard input; a pipe such as <(zcat papers.jsonl.gz) too)"
    )
    sp.add_argument(
        "--retriever",
        choices=("dense", "bm25", "hybrid"),
        help="dense (cosine), bm25 (keywords) or hybrid (both, rank-fused); default: the one finetune_embeddings "
        "measured best, recorded beside the model, else dense",
    )
    sp.add_argument(
        "--out",
        required=True,
        help="index directory to create (an earlier index there is replaced; any other non-empty directory is refused)",
    )
    sp.add_argument("--batch-size", type=at_least(1), default=64, help="windows per batch at most")
    sp.add_argument(
        "--max-tokens",
        type=at_least(1),
        default=2048,
        help="padded word pieces per batch at most (small batches of long windows are faster on CPU; raise on a GPU)",
    )
    sp.add_argument(
        "--max-length",
        type=int,
        help="word pieces per window, from 8 to the model's maximum positions; longer texts are windowed "
        "(default: 256, or the model's maximum positions if fewer)",
    )
    add_precision(sp, "index")
    model_help = (
        "encoder that embeds the query (default: the one the index records, found relative to the index, "
        "then at its absolute path); must be the encoder the index was built with (its content hash is checked)"
    )
    sp = add("search", cmd_search, "top-k documents of an index for a query, with the index's retriever's scores")
    sp.add_argument(
        "query", nargs="+", help="query text (several words are joined by spaces; - reads it from standard input)"
    )
    sp.add_argument("--index", required=True, help="index directory written by `minisci index`")
    sp.add_argument("--model", help=model_help)
    sp.add_argument("-k", type=at_least(1), default=10, help="number of documents to return")
    sp = add("reviewers", cmd_reviewers, "rank authors of an index by similarity of their papers to an abstract")
    sp.add_argument("abstract", help="UTF-8 file holding the abstract (-: standard input)")
    sp.add_argument("--index", required=True, help="index directory written by `minisci index`")
    sp.add_argument("--model", help=model_help)
    sp.add_argument("-k", type=at_least(1), default=10, help="number of authors to return")
    sp.add_argument(
        "--exclude",
        action="append",
        default=[],
        type=author_name,
        help="author to exclude (conflict of interest); repeatable",
    )
    sp.add_argument(
        "--aggregation",
        choices=("max", "mean_top3"),
        default="max",
        help="author score: best paper (max) or mean of the three best papers",
    )
    from minisci.serve.demo import add_demo_parser  # `minisci demo`: its options live beside its launcher

    add_demo_parser(sub)
    # A usage error found after parsing (texts and --file together, an unknown option) names the command
    # and its --help, not `minisci`, whose help lists no command's options
    for sp in sub.choices.values():
        sp.set_defaults(usage_error=sp.error)
    return p


EXAMPLES_ALL = (
    "examples:\n"
    + "\n".join(line for text in EXAMPLES.values() for line in text.splitlines()[1:2])
    + "\n\nRun `minisci COMMAND --help` for a command's options."
)

# What a library raises for a bad file that no check above caught; reported in one line too.
LIBRARY_ERRORS = (OSError, ValueError, KeyError, UnicodeDecodeError)


def main(argv: list[str] | None = None) -> int:
    """Run one command. Every failure is one line on stderr: exit 2 for bad options (argparse), 1 otherwise;
    output into a pipe whose reader has gone (``| head``) stops quietly with exit code 141."""
    return run_command(_run, argv, library_errors=LIBRARY_ERRORS)


PACKAGE = Path(__file__).resolve().parents[1]


def _show_warning(message, category, filename, lineno, file=None, line=None, *, default=warnings.showwarning) -> None:
    """minisci's own warnings as one ``warning: ...`` line on stderr; other libraries' as Python prints them."""
    if Path(filename).resolve().is_relative_to(PACKAGE):
        print(f"warning: {message}", file=sys.stderr)
    else:
        default(message, category, filename, lineno, file, line)


# 128 + SIGPIPE: the status a shell reports for `cat`, `grep` or `sort` when the reader of their output
# (`| head`) has gone, as 130 (128 + SIGINT) is Ctrl-C's
EXIT_BROKEN_PIPE = 141


def _run(argv: list[str] | None) -> int | None:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # argparse would blame `minisci` itself for an option the command does not take
        args.usage_error(f"unrecognized arguments: {' '.join(unknown)}")
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        try:
            args.fn(args)
            sys.stdout.flush()  # output that fits the buffer meets the closed pipe here, not at exit
        except BrokenPipeError:
            _drop_stdout()
            return EXIT_BROKEN_PIPE
    return None


def _drop_stdout() -> None:
    """The reader of standard output is gone (``minisci ... | head``): stop quietly, as Unix tools do.
    Standard output is pointed at /dev/null (the recipe of Python's ``signal`` documentation), so that
    the interpreter's own flush at exit does not fail a second time and print a traceback."""
    import io
    import os

    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, io.UnsupportedOperation):  # not a file (a test's capture): nothing to flush
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
