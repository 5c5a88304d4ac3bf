"""Fast inference with the fine-tuned models: the Hugging Face pipeline's own pre- and
post-processing (so the output is exactly what users know from
``pipeline("token-classification", aggregation_strategy="first")`` / ``pipeline("text-classification")``),
with the model forward replaced by length-sorted, padded batches under ``torch.inference_mode``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from minisci.errors import MinisciError
from minisci.precision import apply_precision

MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def _check_model_dir(model_dir: str | Path) -> Path:
    path = Path(model_dir)
    if not (path / "config.json").is_file():
        raise MinisciError(f"{path}: not a model directory (no config.json); run `dvc repro` or pass --model")
    return path


def _pipeline(task: str, model_dir: str | Path, precision: str, **kwargs):
    from transformers import pipeline

    path = _check_model_dir(model_dir)
    pipe = pipeline(task, model=str(path), device="cpu" if not torch.cuda.is_available() else 0, **kwargs)
    if "BertCrfForTokenClassification" in (pipe.model.config.architectures or []):
        warnings.warn(f"{path} was fine-tuned with a CRF head (finetune_ner.crf); like transformers.pipeline, "
                      "tagging here takes each word's best label from the emissions, without the CRF's Viterbi "
                      "decoding that the stage's evaluation uses, so predictions can differ from its scores", stacklevel=3)
    apply_precision(pipe.model, precision)
    return pipe


def token_classifier(model_dir: str | Path, stride: int = 64, precision: str = "fp32"):
    """A token-classification pipeline (aggregation "first"); texts longer than the model's maximum
    length are split into overlapping windows (``stride`` tokens of overlap), not cut.
    ``precision``: see :mod:`minisci.precision` (fp32 is the pipeline exactly)."""
    return _pipeline("token-classification", model_dir, precision, aggregation_strategy="first", stride=stride)


def text_classifier(model_dir: str | Path, precision: str = "fp32"):
    """A text-classification pipeline returning every label's score; ``precision`` as above."""
    return _pipeline("text-classification", model_dir, precision, top_k=None, truncation=True)


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
    order = sorted(range(len(chunks)), key=lambda i: chunks[i]["input_ids"].shape[1])
    logits: list[torch.Tensor | None] = [None] * len(chunks)
    device = pipe.model.device
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
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
    chunks, owner = [], []
    for ti, text in enumerate(texts):
        for chunk in pipe.preprocess(text, **pipe._preprocess_params):
            chunks.append(chunk)
            owner.append(ti)
    logits = _sorted_forward(pipe, chunks, batch_size, progress)
    per_text: list[list[dict]] = [[] for _ in texts]
    for chunk, lg, ti in zip(chunks, logits, owner):
        out = {k: v for k, v in chunk.items() if k not in ("word_ids", "word_to_chars_map")}
        per_text[ti].append({**out, "logits": lg, "word_ids": chunk.get("word_ids"), "word_to_chars_map": chunk.get("word_to_chars_map")})
    return [[_plain(e) for e in pipe.postprocess(outs, **pipe._postprocess_params)] for outs in per_text]


def classify(pipe, texts: list[str], batch_size: int = 64, progress: Callable | None = None) -> list[dict]:
    """Label, score and every label's score per text (the pipeline's ``top_k=None`` output)."""
    _check_texts(texts)
    chunks = [pipe.preprocess(t, **pipe._preprocess_params) for t in texts]
    logits = _sorted_forward(pipe, chunks, batch_size, progress)
    results = []
    for lg in logits:
        scores = pipe.postprocess({"logits": lg}, **pipe._postprocess_params)
        results.append({"label": scores[0]["label"], "score": float(scores[0]["score"]),
                        "scores": {s["label"]: float(s["score"]) for s in scores}})
    return results


def _check_texts(texts: list[str]) -> None:
    for i, t in enumerate(texts, start=1):
        if not isinstance(t, str) or not t.strip():
            raise MinisciError(f"input {i}: empty text")


def _plain(entity: dict) -> dict:
    """JSON-friendly copy (NumPy scalars to Python)."""
    return {k: (v.item() if hasattr(v, "item") else v) for k, v in entity.items()}
