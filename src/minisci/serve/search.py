"""A NumPy index of document embeddings (:mod:`minisci.encoding`), semantic search and reviewer
recommendation.

The index is plain files: ``embeddings.npy`` (float32, loaded without pickle), ``documents.jsonl``
and ``index.json`` (model, dimension, count, max_length).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np

from minisci import encoding
from minisci.encoding import embed
from minisci.errors import DataFormatError, MinisciError
from minisci.io import atomic_path, iter_jsonl, write_jsonl
from minisci.serve.precision import apply_precision

AGGREGATIONS = ("max", "mean_top3")


def load_encoder(model_dir: str | Path, precision: str = "fp32"):
    """Encoder and tokenizer; ``precision`` as in :mod:`minisci.serve.precision`."""
    model, tok = encoding.load_encoder(model_dir)
    return apply_precision(model, precision), tok


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


def build_index(
    model_dir,
    docs: list[dict],
    out_dir,
    batch_size: int = 64,
    max_length: int = 256,
    progress: Callable | None = None,
    precision: str = "fp32",
    max_tokens: int = 2048,
) -> dict:
    """Embed ``docs`` into ``out_dir``; queries against the index are embedded with the same model,
    ``max_length`` and ``precision`` (recorded in ``index.json``)."""
    model, tok = load_encoder(model_dir, precision)
    vecs = embed(model, tok, [d["_text"] for d in docs], batch_size, max_length, progress, max_tokens)
    info = {
        "model": str(model_dir),
        "dimension": int(vecs.shape[1]),
        "documents": len(docs),
        "max_length": max_length,
        "precision": precision,
    }
    with atomic_path(out_dir) as tmp:
        tmp.mkdir()
        np.save(tmp / "embeddings.npy", vecs, allow_pickle=False)
        write_jsonl(tmp / "documents.jsonl", [{k: v for k, v in d.items() if k != "_text"} for d in docs])
        (tmp / "index.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def load_index(index_dir) -> tuple[np.ndarray, list[dict], dict]:
    """Embeddings, documents and ``index.json`` of an index; a missing, truncated or mismatched file is
    one clear error, not a NumPy or JSON traceback."""
    index_dir = Path(index_dir)
    if not (index_dir / "index.json").is_file():
        raise MinisciError(f"{index_dir}: not an index (no index.json); build one with `minisci index`")
    try:
        info = json.loads((index_dir / "index.json").read_text())
        vecs = np.load(index_dir / "embeddings.npy", allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:  # JSONDecodeError is a ValueError; a cut .npy raises either
        raise MinisciError(f"{index_dir}: corrupt index ({e}); rebuild it with `minisci index`") from e
    docs = [row for _, row in iter_jsonl(index_dir / "documents.jsonl")]
    if vecs.ndim != 2 or len(vecs) != len(docs) or not {"model", "max_length"} <= set(info):
        raise MinisciError(
            f"{index_dir}: corrupt index ({vecs.shape} embeddings for {len(docs)} documents); rebuild it with `minisci index`"
        )
    return vecs, docs, info


def search(index_dir, query: str, k: int = 10, encoder=None) -> list[dict]:
    vecs, docs, info = load_index(index_dir)
    model, tok = encoder or load_encoder(info["model"], info.get("precision", "fp32"))
    return rank_documents(vecs @ embed(model, tok, [query], max_length=info["max_length"])[0], docs, k)


def rank_documents(scores: np.ndarray, docs: list[dict], k: int = 10) -> list[dict]:
    """The ``k`` best documents for one query's cosine ``scores`` (one per document), ties in index order."""
    top = np.argsort(-scores, kind="stable")[:k]
    return [{"rank": r + 1, "score": round(float(scores[i]), 4), **docs[i]} for r, i in enumerate(top)]


def recommend_reviewers(
    index_dir, abstract: str, k: int = 10, exclude: tuple[str, ...] = (), aggregation: str = "max", encoder=None
) -> list[dict]:
    """Authors ranked by the similarity of their papers to ``abstract`` (see :func:`rank_authors`)."""
    vecs, docs, info = load_index(index_dir)
    model, tok = encoder or load_encoder(info["model"], info.get("precision", "fp32"))
    scores = vecs @ embed(model, tok, [abstract], max_length=info["max_length"])[0]
    return rank_authors(scores, docs, k, exclude, aggregation)


def rank_authors(
    scores: np.ndarray, docs: list[dict], k: int = 10, exclude: tuple[str, ...] = (), aggregation: str = "max"
) -> list[dict]:
    """Authors ranked by their papers' ``scores``, each with their (up to three) best papers' ids.

    ``max``: an author's best-matching paper; ``mean_top3``: the mean of their three best (rewards
    sustained expertise over one lucky paper). Excluded authors (conflicts of interest) are matched
    case-insensitively.
    """
    if aggregation not in AGGREGATIONS:
        raise MinisciError(f"unknown aggregation {aggregation!r}; choose from {list(AGGREGATIONS)}")
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
