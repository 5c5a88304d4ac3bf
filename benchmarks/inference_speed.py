"""Speed of `minisci ner` / `minisci cite` inference vs the transformers pipeline, agreement and scores.

Usage: python benchmarks/inference_speed.py [--ner-model models/finetune_ner/bc5cdr/adapted]
           [--cite-model models/finetune_classification/scicite/adapted] [--n 400] [--precisions fp32 bf16 int8]
           [--onnx int8|fp32|none]

All sides use the same model and the pipeline's own pre/post-processing. The reference is the
pipeline in float32, one text at a time (its default). Peers, the fast ways a user would pick: the
pipeline with ``batch_size=32``, on PyTorch and on ONNX Runtime (the model exported with torch.onnx,
full graph optimisation, fp32 and dynamic int8, swapped into the pipeline as optimum users do; see
onnx_peer.py). Ours batches length-sorted texts under torch.inference_mode at each --precision, and
on ONNX Runtime (``--backend onnx``, fp32 and int8), and prints its ratio to the one-at-a-time
pipeline and to the fastest peer, then the fastest of ours whose predictions are >= 99.9% identical
to the reference against the fastest peer. Every row prints its agreement with the reference
(identical predictions). A NER model with a CRF head (the default) is compared as the pipeline runs
it, each word's best emission; one more row times what ``minisci ner`` prints for it, the Viterbi
decoding, with its agreement and F1. Timing: the first --n BC5CDR test sentences and SciCite test citations,
best of --rounds, all measured in this one run. Agreement with the pipeline and the score against
the gold labels use the *whole* test sets (the pipeline's own output on them is the reference):
entity F1 on exact character spans (type included) for NER, accuracy and macro-F1 for citations.
Each task also prints the highest ratio any implementation could reach on this CPU, in fp32 and in
bf16 (see roofline.py).
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from machine import HelpFormatter, positive_int, print_machine

from minisci.data.readers import NerSentence, load_prepared, spans
from minisci.serve.models import PRECISIONS  # torch-free: --help and usage errors come first
from minisci.stage import run_command
from minisci.tasks.classification import CLASSIFICATION
from minisci.tasks.ner import NER

REPO = Path(__file__).resolve().parents[1]  # default inputs are this checkout's, from any folder


def best_time(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def gold_char_spans(s: NerSentence) -> set[tuple[str, int, int]]:
    starts, pos = [], 0
    for tok in s.tokens:
        starts.append(pos)
        pos += len(tok) + 1
    return {(typ, starts[a], starts[b - 1] + len(s.tokens[b - 1])) for typ, a, b in spans(s.tags)}


def entity_f1(gold: list[set], pred: list[set]) -> float:
    tp = sum(len(g & p) for g, p in zip(gold, pred))
    return 2 * tp / max(sum(map(len, gold)) + sum(map(len, pred)), 1)


def model_lengths(pipe, texts: list[str]) -> list[int]:
    """Word pieces of every model input the pipeline makes of these texts (NER: one per window)."""
    lengths = []
    for t in texts:
        chunks = pipe.preprocess(t, **pipe._preprocess_params)
        lengths += [c["input_ids"].shape[1] for c in ([chunks] if isinstance(chunks, Mapping) else chunks)]
    return lengths


def top_label(outputs: list) -> list:
    """The text-classification pipeline's outputs in the shape of ours (top_k=None gives every label,
    best first); the token-classification pipeline's are already in ours."""
    return [{"label": o[0]["label"]} for o in outputs]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=HelpFormatter)
    p.add_argument(
        "--ner-data", default=str(REPO / "data/prepared/bc5cdr"), help="a prepared NER dataset (prepare_data)"
    )
    p.add_argument("--cite-data", default=str(REPO / "data/prepared/scicite"), help="a prepared classification dataset")
    p.add_argument(
        "--ner-model", default=str(REPO / "models/finetune_ner/bc5cdr/adapted"), help="a fine-tuned NER model"
    )
    p.add_argument(
        "--cite-model",
        default=str(REPO / "models/finetune_classification/scicite/adapted"),
        help="a fine-tuned citation-intent model",
    )
    p.add_argument("--n", type=positive_int, default=400, help="texts timed per task")
    p.add_argument("--rounds", type=positive_int, default=2, help="timed rounds; the best counts")
    p.add_argument("--batch-size", type=positive_int, default=32, help="ours: texts per batch")
    p.add_argument(
        "--precisions", nargs="+", choices=PRECISIONS, default=list(PRECISIONS), help="ours: the precisions to time"
    )
    p.add_argument("--peer-batch-size", type=positive_int, default=32, help="the batched pipeline peer's batch_size")
    p.add_argument("--onnx", choices=("int8", "fp32", "none"), default="int8", help="ONNX Runtime peers to run")
    args = p.parse_args(argv)
    from roofline import ceiling_line
    from sklearn.metrics import accuracy_score, f1_score
    from transformers.utils import logging as hf_logging

    from minisci.serve.inference import classify, tag, text_classifier, token_classifier

    hf_logging.set_verbosity_error()  # load reports of encoders saved with pretraining heads
    hf_logging.disable_progress_bar()

    sentences = load_prepared(args.ner_data, task=NER.name).splits["test"]
    citations = load_prepared(args.cite_data, task=CLASSIFICATION.name).splits["test"]
    ents = lambda rows: [{(e["entity_group"], e["start"], e["end"]) for e in r} for r in rows]  # noqa: E731
    labels = lambda rows: [r["label"] for r in rows]  # noqa: E731
    tasks = {  # kind -> (loader, model, texts, runner, its output's shape, what is compared, score)
        NER.command: (
            token_classifier,
            args.ner_model,
            [" ".join(s.tokens) for s in sentences],
            tag,
            lambda outputs: outputs,
            ents,
            lambda pred: f"F1 {100 * entity_f1([gold_char_spans(s) for s in sentences], pred):.2f}",
        ),
        CLASSIFICATION.command: (
            text_classifier,
            args.cite_model,
            [e.text for e in citations],
            classify,
            top_label,
            labels,
            lambda pred: (
                f"acc {100 * accuracy_score([e.label for e in citations], pred):.2f} "
                f"macro-F1 {100 * f1_score([e.label for e in citations], pred, average='macro'):.2f}"
            ),
        ),
    }
    print_machine()
    for name, (load, model, texts, run, from_pipeline, key, score) in tasks.items():
        timed = texts[: args.n]
        pipe = load(model)
        t_pipe = best_time(lambda: [pipe(t) for t in timed], args.rounds)
        ref = key(from_pipeline(pipe(texts)))
        print(
            f"{name}: {len(timed)} texts timed, {len(texts)} scored | pipeline (fp32, one at a time) "
            f"{len(timed) / t_pipe:6.1f} texts/s | {score(ref)}"
        )
        print(ceiling_line(pipe.model.config, model_lengths(pipe, timed), t_pipe))

        def row(label: str, t: float, pred: list, extra: str = "") -> float:
            same = sum(a == b for a, b in zip(pred, ref)) / len(texts)
            print(
                f"  {label}: {len(timed) / t:6.1f} texts/s | ratio {t_pipe / t:5.2f}x{extra} | "
                f"identical to pipeline {same:7.2%} | {score(pred)}",
                flush=True,
            )
            return same

        # 1. peers, the fast ways a user would pick: the pipeline batched, on PyTorch and on ONNX Runtime
        peers = {}
        with tempfile.TemporaryDirectory() as work:
            for label, peer_pipe in peer_pipelines(pipe, work, args.onnx, args.peer_batch_size).items():
                fn = lambda texts, p=peer_pipe, shape=from_pipeline: shape(p(texts, batch_size=args.peer_batch_size))  # noqa: E731
                peers[label] = (best_time(lambda: fn(timed), args.rounds), key(fn(texts)))
        fastest = min(peers, key=lambda k: peers[k][0])
        for label, (t, pred) in peers.items():
            row(f"peer {label}", t, pred)
        # 2. ours, at each backend and precision, against the reference and against the fastest peer
        # (a CRF head's emissions decoded by argmax here, as the pipeline decodes them)
        ours_rows = {}
        for backend, precision in ours_variants(args.precisions, args.onnx):
            ours = argmax_decoding(load(model, precision=precision, backend=backend))
            t_ours = best_time(lambda: run(ours, timed, args.batch_size), args.rounds)
            vs_peer = f" | vs fastest peer ({fastest}) {peers[fastest][0] / t_ours:5.2f}x"
            label = f"ours {precision}" + (" --backend onnx" if backend == "onnx" else "")
            ours_rows[label] = (t_ours, row(label, t_ours, key(run(ours, texts, args.batch_size)), vs_peer))
        if getattr(pipe.model, "crf", None) is not None:  # 3. what `minisci ner` prints: Viterbi over the CRF
            ours = load(model)
            t_ours = best_time(lambda: run(ours, timed, args.batch_size), args.rounds)
            vs_peer = f" | vs fastest peer ({fastest}) {peers[fastest][0] / t_ours:5.2f}x"
            row(
                "ours fp32 with CRF Viterbi (minisci ner's output)",
                t_ours,
                key(run(ours, texts, args.batch_size)),
                vs_peer,
            )
        exact = {k: v for k, v in ours_rows.items() if v[1] >= 0.999}
        if exact:
            best = min(exact, key=lambda k: exact[k][0])
            print(
                f"  best of ours at >= 99.9% identical: {best}, {peers[fastest][0] / exact[best][0]:5.2f}x "
                f"the fastest peer ({fastest})"
            )


def argmax_decoding(pipe):
    """``pipe`` with its CRF head (if any) set aside, so that it decodes each word's best emission as the
    transformers pipeline does with the same model; ``minisci ner`` itself decodes with Viterbi."""
    if getattr(pipe.model, "crf", None) is not None:
        pipe.model.crf = None
    return pipe


def ours_variants(precisions: list[str], onnx: str) -> list[tuple[str, str]]:
    """(backend, precision) pairs of minisci to time: PyTorch at each precision, then ONNX Runtime."""
    out = [("torch", p) for p in precisions]
    if onnx != "none" and _has_ort():
        out += [("onnx", "fp32")] + ([("onnx", "int8")] if onnx == "int8" else [])
    return out


@functools.cache
def _has_ort() -> bool:
    """Whether onnxruntime imports; said once per run when it does not."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        print("  (onnxruntime not installed: no ONNX Runtime rows)")
        return False
    return True


def peer_pipelines(pipe, work_dir: str, which: str, batch_size: int) -> dict:
    """The pipeline with ``batch_size``, and the same pipeline on ONNX Runtime (fp32, and int8 with
    ``which == "int8"``) as optimum users run it; no ORT peer when ORT is not installed. (A CRF head's
    emissions are the exported logits; the pipeline decodes them by argmax either way.)"""
    out = {f"pipeline batch_size={batch_size}": pipe}
    if which == "none" or not _has_ort():
        return out
    from onnx_peer import ort_pipelines

    ort = ort_pipelines(pipe, Path(work_dir), int8=which == "int8")
    return out | {f"pipeline batch_size={batch_size} on {label}": p for label, p in ort.items()}


if __name__ == "__main__":
    sys.exit(run_command(main))  # a missing model, data or params file: one line, exit 1
