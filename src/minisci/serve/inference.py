"""Fast inference with the fine-tuned models, with exactly the output users know from
``pipeline("token-classification", aggregation_strategy="first")`` / ``pipeline("text-classification")``:
the pipeline's own pre-processing, the model forward replaced by length-sorted, padded batches under
``torch.inference_mode``, and the pipeline's post-processing (for NER, a re-implementation of its
"first" aggregation that gives the same output, float for float, without decoding every "O" word).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from minisci.batching import length_batches
from minisci.errors import MinisciError
from minisci.serve.models import load_task_model, resolve_device
from minisci.serve.precision import apply_precision

MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
TASK_OF = {"token-classification": "ner", "text-classification": "cite"}


def _pipeline(task: str, model_dir: str | Path, precision: str, device: str = "auto", **kwargs):
    """The transformers pipeline for ``task`` around a model checked by :func:`load_task_model`."""
    from transformers import pipeline

    model, tokenizer = load_task_model(model_dir, TASK_OF[task], resolve_device(device))
    pipe = pipeline(task, model=model, tokenizer=tokenizer, device=model.device, **kwargs)
    apply_precision(pipe.model, precision)
    return pipe


def token_classifier(model_dir: str | Path, stride: int = 64, precision: str = "fp32", device: str = "auto"):
    """A token-classification pipeline (aggregation "first"); texts longer than the model's maximum
    length are split into overlapping windows (``stride`` tokens of overlap), not cut. A CRF-trained
    model is decoded by :func:`tag` with its constrained Viterbi, as the stage's evaluation does.
    ``precision``: see :mod:`minisci.serve.precision` (fp32 is the pipeline exactly)."""
    return _pipeline("token-classification", model_dir, precision, device, aggregation_strategy="first", stride=stride)


def text_classifier(model_dir: str | Path, precision: str = "fp32", device: str = "auto"):
    """A text-classification pipeline returning every label's score; ``precision`` as above."""
    return _pipeline("text-classification", model_dir, precision, device, top_k=None, truncation=True)


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
    _check_texts(texts)
    if getattr(pipe.model, "crf", None) is not None:
        return _crf_tag(pipe, texts, batch_size, progress)
    chunks, owner = [], []
    for ti, text in enumerate(texts):
        for chunk in pipe.preprocess(text, **pipe._preprocess_params):
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
    postprocess = (
        _first_postprocess if _first_applies(pipe) else lambda p, outs: p.postprocess(outs, **p._postprocess_params)
    )
    return [[_plain(e) for e in postprocess(pipe, outs)] for outs in per_text]


def _first_applies(pipe) -> bool:
    """Whether :func:`_first_postprocess` reproduces ``pipe.postprocess``: aggregation "first" on raw text
    (not pre-split words) with a fast, word-aware tokenizer (WordPiece/BPE with a continuing-subword prefix)."""
    from transformers.pipelines.token_classification import AggregationStrategy

    model = getattr(getattr(pipe.tokenizer, "_tokenizer", None), "model", None)
    return (
        pipe._postprocess_params.get("aggregation_strategy") == AggregationStrategy.FIRST
        and not pipe._preprocess_params.get("is_split_into_words")
        and pipe.tokenizer.is_fast
        and bool(getattr(model, "continuing_subword_prefix", None))
    )


def _first_postprocess(pipe, outputs: list[dict]) -> list[dict]:
    """``pipe.postprocess`` for aggregation "first", output for output, float for float.

    The pipeline builds a dict and decodes a string for every word piece and every word, most of
    them "O" and then thrown away; this follows the same steps (softmax in NumPy per window, words
    from the tokenizer's offsets, each word labelled by its first piece, adjacent words grouped by
    B-/I- tag, the group's score the mean of its words' scores, windows merged by the pipeline's own
    ``aggregate_overlapping_entities``) but decodes strings only for the entities it returns.
    """
    ignore = pipe._postprocess_params.get("ignore_labels") or ["O"]
    id2label = pipe.model.config.id2label
    tags = {i: pipe.get_tag(name) for i, name in id2label.items()}
    unk = pipe.tokenizer.unk_token_id
    to_string = pipe.tokenizer.convert_tokens_to_string
    sentence = outputs[0]["sentence"]
    entities = []
    for out in outputs:
        logits = out["logits"][0].to(torch.float32).numpy()
        maxes = np.max(logits, axis=-1, keepdims=True)
        shifted_exp = np.exp(logits - maxes)
        scores = shifted_exp / shifted_exp.sum(axis=-1, keepdims=True)
        ids = out["input_ids"][0].tolist()
        pieces = pipe.tokenizer.convert_ids_to_tokens(ids)
        words: list[list] = []  # [first piece index, start, end, pieces]
        for i, (tid, special, (start, end)) in enumerate(
            zip(ids, out["special_tokens_mask"][0].tolist(), out["offset_mapping"][0].tolist())
        ):
            if special:
                continue
            piece, is_subword = pieces[i], False
            if tid == unk:
                piece = sentence[start:end]
            else:
                is_subword = len(piece) != end - start
            if words and is_subword:
                words[-1][2] = end
                words[-1][3].append(piece)
            else:
                words.append([i, start, end, [piece]])
        if not words:
            continue
        first = np.array([w[0] for w in words])
        labels = scores[first].argmax(axis=-1).tolist()
        group: list[int] = []
        for w, label in enumerate(labels + [None]):
            if group and label is not None:
                bi, tag = tags[label]
                if tag == tags[labels[group[-1]]][1] and bi != "B":
                    group.append(w)
                    continue
            if group:
                name = id2label[labels[group[0]]].split("-", 1)[-1]
                if name not in ignore:
                    members = [words[g] for g in group]
                    entities.append(
                        {
                            "entity_group": name,
                            "score": np.mean(np.nanmean([scores[words[g][0]][labels[g]] for g in group])),
                            "word": to_string([to_string(m[3]) for m in members]),
                            "start": members[0][1],
                            "end": members[-1][2],
                        }
                    )
            group = [w]
    return pipe.aggregate_overlapping_entities(entities) if len(outputs) > 1 else entities


def _crf_tag(pipe, texts: list[str], batch_size: int, progress: Callable | None) -> list[list[dict]]:
    """Entities of a CRF-trained model, decoded as the stage's evaluation decodes them.

    The words are the tokenizer's pre-tokenised words (the ones the pipeline aggregates over); they
    go through the evaluation's own windowing (``encode_sentences``), first-piece emissions, the
    CRF's constrained Viterbi and merging (``merge_predictions``), so the CLI's entities are the
    evaluation's. An entity's score is the mean softmax probability of its words' tags.
    """
    from minisci.data.readers import NerSentence, spans
    from minisci.finetune.ner import encode_sentences, merge_predictions

    tok, model = pipe.tokenizer, pipe.model
    words = [tok.backend_tokenizer.pre_tokenizer.pre_tokenize_str(t) for t in texts]
    sentences = [NerSentence(tuple(w for w, _ in ws), ("O",) * len(ws), None, 0) for ws in words]
    max_length = min(tok.model_max_length, model.config.max_position_embeddings)
    feats = encode_sentences(sentences, tok, None, max_length)
    chunks = [
        {"input_ids": torch.tensor([f["input_ids"]]), "attention_mask": torch.ones(1, len(f["input_ids"]))}
        for f in feats
    ]
    logits = [lg[0] for lg in _sorted_forward(pipe, chunks, batch_size, progress)]
    id2label = model.config.id2label
    tags = merge_predictions(feats, logits, [len(s.tokens) for s in sentences], id2label, model.crf.decode)
    probs: list[list] = [[None] * len(s.tokens) for s in sentences]
    for f, lg in zip(feats, logits):
        for k, p in enumerate(lg[f["first_positions"]].softmax(-1)):
            probs[f["sentence"]][f["word_start"] + k] = p
    label2id = model.config.label2id
    results = []
    for ws, ts, ps, text in zip(words, tags, probs, texts):
        entities = []
        for etype, a, b in spans(ts):
            start, end = ws[a][1][0], ws[b - 1][1][1]
            score = float(np.mean([float(ps[w][label2id[ts[w]]]) for w in range(a, b)]))
            word = tok.decode(tok(text[start:end], add_special_tokens=False)["input_ids"])
            entities.append({"entity_group": etype, "score": score, "word": word, "start": start, "end": end})
        results.append(entities)
    return results


def classify(pipe, texts: list[str], batch_size: int = 64, progress: Callable | None = None) -> list[dict]:
    """Label, score and every label's score per text (the pipeline's ``top_k=None`` output)."""
    _check_texts(texts)
    chunks = [pipe.preprocess(t, **pipe._preprocess_params) for t in texts]
    logits = _sorted_forward(pipe, chunks, batch_size, progress)
    results = []
    for lg in logits:
        scores = pipe.postprocess({"logits": lg}, **pipe._postprocess_params)
        results.append(
            {
                "label": scores[0]["label"],
                "score": float(scores[0]["score"]),
                "scores": {s["label"]: float(s["score"]) for s in scores},
            }
        )
    return results


def _check_texts(texts: list[str]) -> None:
    for i, t in enumerate(texts, start=1):
        if not isinstance(t, str) or not t.strip():
            raise MinisciError(f"input {i}: empty text")


def _plain(entity: dict) -> dict:
    """JSON-friendly copy (NumPy scalars to Python)."""
    return {k: (v.item() if hasattr(v, "item") else v) for k, v in entity.items()}
