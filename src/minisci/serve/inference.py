"""Fast inference with the fine-tuned models, with exactly the output users know from
``pipeline("token-classification", aggregation_strategy="first")`` / ``pipeline("text-classification")``:
the pipeline's own pre-processing, the model forward replaced by length-sorted, padded batches under
``torch.inference_mode``, and the pipeline's post-processing (for NER, a re-implementation of its
"first" aggregation that gives the same output, float for float, without decoding every "O" word).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from minisci.batching import length_batches
from minisci.cards import default_stride
from minisci.errors import MinisciError
from minisci.serve import pipeline_compat as compat
from minisci.serve.checks import check_texts
from minisci.serve.models import check_stride, load_task_model, resolve_device
from minisci.serve.precision import apply_precision
from minisci.tasks import registry

MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@contextlib.contextmanager
def _quiet_about(model_class: str):
    """Drop the pipeline's "The model '<model_class>' is not supported for <task>" error line, logged for
    minisci's own task classes (the CRF tagger), which the pipeline runs like their base class."""
    import logging

    class Drop(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return not str(record.msg).startswith(f"The model '{model_class}' is not supported for")

    log = logging.getLogger("transformers.pipelines.base")
    drop = Drop()
    log.addFilter(drop)
    try:
        yield
    finally:
        log.removeFilter(drop)


def _pipeline(task: str, model_dir: str | Path, precision: str, device: str, backend: str, **kwargs):
    """The transformers pipeline for ``task`` around a model checked by :func:`load_task_model`."""
    from transformers import pipeline

    from minisci.serve.onnx_backend import BACKENDS, check_onnx, use_onnx

    if backend not in BACKENDS:
        raise MinisciError(f"unknown backend {backend!r}; choose from {list(BACKENDS)}")
    if backend == "onnx":
        check_onnx(precision)  # before the model is loaded
    model, tokenizer = load_task_model(model_dir, registry.of_pipeline(task), resolve_device(device))
    if "stride" in kwargs:  # windows of long texts: the overlap fits the model's positions
        kwargs["stride"] = default_stride(tokenizer) if kwargs["stride"] is None else kwargs["stride"]
        check_stride(kwargs["stride"], tokenizer, model_dir)
    with _quiet_about(type(model).__name__):
        pipe = pipeline(task, model=model, tokenizer=tokenizer, device=model.device, **kwargs)
    if backend == "onnx":
        return use_onnx(pipe, model_dir, precision)
    apply_precision(pipe.model, precision)
    return pipe


def token_classifier(
    model_dir: str | Path,
    stride: int | None = None,
    precision: str = "fp32",
    device: str = "auto",
    backend: str = "torch",
):
    """A token-classification pipeline (aggregation "first"); texts longer than the model's maximum
    length are split into overlapping windows (``stride`` tokens of overlap, default 64 or half a
    window of a model with few positions), not cut. A CRF-trained
    model is decoded by :func:`tag` with its constrained Viterbi, as the stage's evaluation does.
    ``precision``: see :mod:`minisci.serve.precision` (fp32 is the pipeline exactly). ``backend``:
    ``torch``, or ``onnx`` (ONNX Runtime on CPU, fp32 or int8; see :mod:`minisci.serve.onnx_backend`)."""
    return _pipeline(
        "token-classification", model_dir, precision, device, backend, aggregation_strategy="first", stride=stride
    )


def text_classifier(model_dir: str | Path, precision: str = "fp32", device: str = "auto", backend: str = "torch"):
    """A text-classification pipeline returning every label's score; ``precision`` and ``backend`` as above."""
    return _pipeline("text-classification", model_dir, precision, device, backend, top_k=None, truncation=True)


def _pad(chunks: list[dict], pad_id: int) -> dict[str, torch.Tensor]:
    longest = max(c["input_ids"].shape[1] for c in chunks)
    batch = {}
    for key in MODEL_INPUTS:
        if key not in chunks[0]:
            continue
        fill = pad_id if key == "input_ids" else 0
        rows = [torch.nn.functional.pad(c[key][0], (0, longest - c[key].shape[1]), value=fill) for c in chunks]
        batch[key] = torch.stack(rows)
    return batch


@torch.inference_mode()
def _sorted_forward(pipe, chunks: list[dict], batch_size: int, progress: Callable | None) -> list[torch.Tensor]:
    """Logits of every chunk, computed in length-sorted batches, trimmed back to each chunk's length."""
    logits: list[torch.Tensor | None] = [None] * len(chunks)
    device = pipe.model.device
    lengths = [c["input_ids"].shape[1] for c in chunks]
    for idx in length_batches(lengths, batch_size):
        batch = {k: v.to(device) for k, v in _pad([chunks[i] for i in idx], pipe.tokenizer.pad_token_id).items()}
        out = pipe.model(**batch).logits.float().cpu()
        for j, i in enumerate(idx):
            logits[i] = out[j : j + 1, : chunks[i]["input_ids"].shape[1]] if out.dim() == 3 else out[j : j + 1]
        if progress:
            progress(len(idx))
    return logits


def tag(pipe, texts: list[str], batch_size: int = 64, progress: Callable | None = None) -> list[list[dict]]:
    """Entities per text: ``entity_group``, ``score``, ``word``, ``start``, ``end`` (character offsets)."""
    if not check_texts(texts):  # no text, no entities (and no batch to pad)
        return []
    if getattr(pipe.model, "crf", None) is not None:
        return _crf_tag(pipe, texts, batch_size, progress)
    chunks, owner = [], []
    for ti, text in enumerate(texts):
        for chunk in compat.preprocess(pipe, text):
            chunks.append(chunk)
            owner.append(ti)
    logits = _sorted_forward(pipe, chunks, batch_size, progress)
    per_text: list[list[dict]] = [[] for _ in texts]
    for chunk, lg, ti in zip(chunks, logits, owner):
        out = {k: v for k, v in chunk.items() if k not in ("word_ids", "word_to_chars_map")}
        per_text[ti].append(
            {
                **out,
                "logits": lg,
                "word_ids": chunk.get("word_ids"),
                "word_to_chars_map": chunk.get("word_to_chars_map"),
            }
        )
    postprocess = compat.first_postprocess if compat.first_applies(pipe) else compat.postprocess
    return [[_plain(e) for e in postprocess(pipe, outs)] for outs in per_text]


def overlapping_windows(pieces: list[list[int]], max_length: int, stride: int) -> list[tuple[int, int]]:
    """Word ranges ``(start, end)`` whose pieces fit ``max_length - 2`` ([CLS], [SEP]), each next one
    starting as far back as keeps at most ``stride`` pieces of the previous one: the overlap that gives
    words near a window's edge their context. ``stride`` 0: the evaluation's windows
    (:func:`minisci.tasks.ner.windows`), every word in one. A word longer than the budget is a window
    of its own, cut to the budget (its first piece, which carries the prediction, kept)."""
    budget = max_length - 2
    sizes = [min(len(p), budget) for p in pieces]
    out, start = [], 0
    while True:
        end, used = start, 0
        while end < len(sizes) and (used + sizes[end] <= budget or end == start):
            used += sizes[end]
            end += 1
        out.append((start, end))
        if end >= len(sizes):
            return out
        nxt, back = (
            end,
            0,
        )  # back over words while the overlap keeps within the stride and leaves room for the next word
        while nxt - 1 > start and back + sizes[nxt - 1] <= min(stride, budget - sizes[end]):
            nxt -= 1
            back += sizes[nxt]
        start = nxt


def _crf_tag(pipe, texts: list[str], batch_size: int, progress: Callable | None) -> list[list[dict]]:
    """Entities of a CRF-trained model, decoded as the stage's evaluation decodes them.

    The words are :func:`~minisci.serve.pipeline_compat.text_words` (the ones the pipeline aggregates over); each
    text is encoded whole, as the pipeline encodes it, and its pieces are given to those words
    (``text_pieces``). A text longer than one window is cut into windows that overlap by the
    pipeline's ``stride`` pieces (:func:`overlapping_windows`); each word takes its first-piece emissions
    from the window where it has the most context on both sides, and the CRF's constrained Viterbi
    decodes the whole text at once, so no entity is cut at a window's edge. A text of one window is
    decoded exactly as the evaluation decodes it. An entity's score is the mean softmax probability
    of its words' tags.
    """
    from minisci.data.readers import spans, to_iob2
    from minisci.serve.models import max_positions
    from minisci.tasks.ner import text_pieces

    tok, model = pipe.tokenizer, pipe.model
    words = [compat.text_words(tok, t) for t in texts]
    max_length = min(tok.model_max_length, max_positions(model.config.to_dict()))
    stride = pipe._preprocess_params.get("stride") or 0
    budget, cls, sep = max_length - 2, tok.cls_token_id, tok.sep_token_id
    chunks, where = [], []  # each window's inputs, and its (text, first word, first-piece positions)
    for ti, pieces in enumerate(text_pieces(texts, words, tok)):
        for start, end in overlapping_windows(pieces, max_length, stride):
            ids, firsts = [cls], []
            for w in range(start, end):
                firsts.append(len(ids))
                ids.extend(pieces[w][:budget])
            ids.append(sep)
            chunks.append({"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids))})
            where.append((ti, start, firsts))
    logits = [lg[0] for lg in _sorted_forward(pipe, chunks, batch_size, progress)]
    best: list[list] = [[None] * len(ws) for ws in words]  # per word: (context, emissions)
    for (ti, start, firsts), lg in zip(where, logits):
        for k, row in enumerate(lg[firsts]):
            context = min(k, len(firsts) - 1 - k)
            if best[ti][start + k] is None or context > best[ti][start + k][0]:
                best[ti][start + k] = (context, row)
    emissions = [torch.stack([row for _, row in b]) for b in best]
    id2label = model.config.id2label
    tags = [list(to_iob2([id2label[i] for i in path])) for path in model.crf.decode_batch(emissions)]
    probs = [e.softmax(-1) for e in emissions]
    label2id = {name: i for i, name in id2label.items()}  # id2label's inverse: config.json may lack label2id
    results = []
    for ws, ts, ps, text in zip(words, tags, probs, texts):
        entities = []
        for etype, a, b in spans(ts):
            start, end = ws[a][0], ws[b - 1][1]
            score = float(np.mean([float(ps[w][label2id[ts[w]]]) for w in range(a, b)]))
            word = tok.decode(tok(text[start:end], add_special_tokens=False)["input_ids"])
            entities.append({"entity_group": etype, "score": score, "word": word, "start": start, "end": end})
        results.append(entities)
    return results


def classify(
    pipe, texts: list[str], batch_size: int = 64, progress: Callable | None = None, cut: list | None = None
) -> list[dict]:
    """Label, score and every label's score per text (the pipeline's ``top_k=None`` output). A text
    longer than the model's positions is classified on its first window, as the pipeline does; given a
    list ``cut``, ``(index, word pieces kept)`` of those texts is appended to it (for a command to say so)."""
    if not check_texts(texts):
        return []
    chunks = [compat.preprocess(pipe, t) for t in texts]
    if cut is not None:
        cut.extend(_cut_texts(pipe, texts, chunks))
    logits = _sorted_forward(pipe, chunks, batch_size, progress)
    results = []
    for lg in logits:
        scores = compat.postprocess(pipe, {"logits": lg})
        results.append(
            {
                "label": scores[0]["label"],
                "score": float(scores[0]["score"]),
                "scores": {s["label"]: float(s["score"]) for s in scores},
            }
        )
    return results


def _cut_texts(pipe, texts: list[str], chunks: list) -> list[tuple[int, int]]:
    """Index and pieces kept of the texts that the pipeline's truncation cut: those whose pieces fill the window are
    tokenised again, whole (only they can have been cut, so the common case costs nothing)."""
    lengths = [int(c["input_ids"].shape[-1]) for c in chunks]
    full = max(lengths, default=0)
    return [
        (i, n)
        for i, (t, n) in enumerate(zip(texts, lengths))
        if n == full and len(pipe.tokenizer(t, truncation=False, verbose=False)["input_ids"]) > n
    ]


def _plain(entity: dict) -> dict:
    """JSON-friendly copy (NumPy scalars to Python)."""
    return {k: (v.item() if hasattr(v, "item") else v) for k, v in entity.items()}
