"""Sentence/document embeddings (mean pooling, unit length), a NumPy index, semantic search and
reviewer recommendation.

Long documents are windowed, not cut: a text longer than ``max_length`` word pieces is split into
consecutive windows and its embedding is the normalised mean of the window embeddings.
The index is plain files: ``embeddings.npy`` (float32, loaded without pickle), ``documents.jsonl``
and ``index.json`` (model, dimension, count, max_length).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from minisci.errors import DataFormatError, MinisciError
from minisci.io import atomic_path, iter_jsonl, write_jsonl
from minisci.precision import apply_precision

AGGREGATIONS = ("max", "mean_top3")


def load_encoder(model_dir: str | Path, precision: str = "fp32"):
    """Encoder and tokenizer; ``precision`` as in :mod:`minisci.precision`."""
    from transformers import AutoModel, AutoTokenizer

    path = Path(model_dir)
    if not (path / "config.json").is_file():
        raise MinisciError(f"{path}: not a model directory (no config.json)")
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    model = AutoModel.from_pretrained(path, use_safetensors=True, local_files_only=True, trust_remote_code=False)
    return apply_precision(model.eval(), precision), tok


def windows_of(ids: list[int], size: int) -> list[list[int]]:
    return [ids[i : i + size] for i in range(0, max(len(ids), 1), size)]


def length_batches(lengths: list[int], batch_size: int, max_tokens: int) -> list[list[int]]:
    """Indices sorted by length, cut into batches of at most ``batch_size`` items and ``max_tokens``
    padded pieces (a single longer item still gets its own batch)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    for i in order:
        if batches and len(batches[-1]) < batch_size and (len(batches[-1]) + 1) * lengths[i] <= max_tokens:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


@torch.inference_mode()
def embed(model, tokenizer, texts: list[str], batch_size: int = 64, max_length: int = 256,
          progress: Callable | None = None, max_tokens: int = 2048) -> np.ndarray:
    """Unit-length mean-pooled embeddings [len(texts), hidden], length-sorted batches of at most
    ``batch_size`` windows and ``max_tokens`` padded pieces: long windows go in small batches, whose
    activations stay in cache (abstracts embed ~20% faster on a 2-core CPU than in batches of 32)."""
    for i, t in enumerate(texts, start=1):
        if not isinstance(t, str) or not t.strip():
            raise MinisciError(f"text {i}: empty text")
    body = max_length - 2
    pieces = tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]  # windowed below, not cut
    items = [(ti, [tokenizer.cls_token_id, *w, tokenizer.sep_token_id]) for ti, ids in enumerate(pieces) for w in windows_of(ids, body)]
    vecs = np.zeros((len(items), model.config.hidden_size), dtype=np.float32)
    device = next(model.parameters()).device
    for idx in length_batches([len(ids) for _, ids in items], batch_size, max_tokens):
        longest = max(len(items[i][1]) for i in idx)
        ids = torch.full((len(idx), longest), tokenizer.pad_token_id)
        mask = torch.zeros_like(ids)
        for j, i in enumerate(idx):
            n = len(items[i][1])
            ids[j, :n] = torch.tensor(items[i][1])
            mask[j, :n] = 1
        hidden = model(input_ids=ids.to(device), attention_mask=mask.to(device)).last_hidden_state
        m = mask.to(device).unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1)
        vecs[idx] = pooled.float().cpu().numpy()
        if progress:
            progress(len(idx))
    out = np.zeros((len(texts), vecs.shape[1]), dtype=np.float32)
    for (ti, _), v in zip(items, vecs):
        out[ti] += v / max(np.linalg.norm(v), 1e-12)
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


def read_collection(path: str | Path) -> list[dict]:
    """JSONL documents with ``id`` and at least one of ``title`` / ``text``; ``authors`` optional."""
    docs = []
    for lineno, obj in iter_jsonl(path):
        text = " ".join(x for x in (obj.get("title"), obj.get("text")) if isinstance(x, str) and x.strip())
        if "id" not in obj or not text:
            raise DataFormatError(path, lineno, "expected an 'id' and a non-empty 'title' or 'text'")
        authors = obj.get("authors", [])
        if not isinstance(authors, list) or not all(isinstance(a, str) for a in authors):
            raise DataFormatError(path, lineno, "'authors' must be a list of strings")
        docs.append({"id": str(obj["id"]), "title": obj.get("title") or "", "authors": authors, "_text": text})
    if not docs:
        raise DataFormatError(path, None, "no documents")
    return docs


def build_index(model_dir, docs: list[dict], out_dir, batch_size: int = 64, max_length: int = 256,
                progress: Callable | None = None, precision: str = "fp32", max_tokens: int = 2048) -> dict:
    """Embed ``docs`` into ``out_dir``; queries against the index are embedded with the same model,
    ``max_length`` and ``precision`` (recorded in ``index.json``)."""
    model, tok = load_encoder(model_dir, precision)
    vecs = embed(model, tok, [d["_text"] for d in docs], batch_size, max_length, progress, max_tokens)
    info = {"model": str(model_dir), "dimension": int(vecs.shape[1]), "documents": len(docs), "max_length": max_length,
            "precision": precision}
    with atomic_path(out_dir) as tmp:
        tmp.mkdir()
        np.save(tmp / "embeddings.npy", vecs, allow_pickle=False)
        write_jsonl(tmp / "documents.jsonl", [{k: v for k, v in d.items() if k != "_text"} for d in docs])
        (tmp / "index.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def load_index(index_dir) -> tuple[np.ndarray, list[dict], dict]:
    index_dir = Path(index_dir)
    if not (index_dir / "index.json").is_file():
        raise MinisciError(f"{index_dir}: not an index (no index.json); build one with `minisci index`")
    info = json.loads((index_dir / "index.json").read_text())
    vecs = np.load(index_dir / "embeddings.npy", allow_pickle=False)
    docs = [row for _, row in iter_jsonl(index_dir / "documents.jsonl")]
    return vecs, docs, info


def search(index_dir, query: str, k: int = 10, encoder=None) -> list[dict]:
    vecs, docs, info = load_index(index_dir)
    model, tok = encoder or load_encoder(info["model"], info.get("precision", "fp32"))
    q = embed(model, tok, [query], max_length=info["max_length"])[0]
    scores = vecs @ q
    top = np.argsort(-scores, kind="stable")[:k]
    return [{"rank": r + 1, "score": round(float(scores[i]), 4), **docs[i]} for r, i in enumerate(top)]


def recommend_reviewers(index_dir, abstract: str, k: int = 10, exclude: tuple[str, ...] = (), aggregation: str = "max",
                        encoder=None) -> list[dict]:
    """Authors ranked by the similarity of their papers to ``abstract``.

    ``max``: an author's best-matching paper; ``mean_top3``: the mean of their three best (rewards
    sustained expertise over one lucky paper). Excluded authors (conflicts of interest) are matched
    case-insensitively.
    """
    if aggregation not in AGGREGATIONS:
        raise MinisciError(f"unknown aggregation {aggregation!r}; choose from {list(AGGREGATIONS)}")
    vecs, docs, info = load_index(index_dir)
    model, tok = encoder or load_encoder(info["model"], info.get("precision", "fp32"))
    scores = vecs @ embed(model, tok, [abstract], max_length=info["max_length"])[0]
    banned = {a.casefold().strip() for a in exclude}
    papers = defaultdict(list)
    for i, d in enumerate(docs):
        for a in d.get("authors", []):
            if a.casefold().strip() not in banned:
                papers[a].append((float(scores[i]), d["id"]))
    ranked = []
    for author, ps in papers.items():
        ps.sort(reverse=True)
        score = ps[0][0] if aggregation == "max" else float(np.mean([s for s, _ in ps[:3]]))
        ranked.append({"author": author, "score": round(score, 4), "papers": [pid for _, pid in ps[:3]]})
    ranked.sort(key=lambda r: (-r["score"], r["author"]))
    return [{"rank": i + 1, **r} for i, r in enumerate(ranked[:k])]
