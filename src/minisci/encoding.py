"""Windowed, mean-pooled text embeddings: what the embeddings stage evaluates with and what the
search commands index with, so that a stage's retrieval scores and a user's index agree.

Long documents are windowed, not cut: a text longer than ``max_length`` word pieces is split into
consecutive windows and its embedding is the normalised mean of the window embeddings.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from minisci.batching import length_batches, windows_of
from minisci.errors import MinisciError
from minisci.pretrain.model import check_tokenizer_files


def load_encoder(model_dir: str | Path):
    """Encoder (``AutoModel``, inference mode, fp32) and tokenizer of a model directory."""
    from transformers import AutoModel, AutoTokenizer

    path = Path(model_dir)
    if not (path / "config.json").is_file():
        raise MinisciError(f"{path}: not a model directory (no config.json)")
    check_tokenizer_files(path)
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    model = AutoModel.from_pretrained(path, use_safetensors=True, local_files_only=True, trust_remote_code=False)
    return model.eval(), tok


def is_sentence_transformer(model) -> bool:
    """Duck-typed, so that this module need not import sentence-transformers."""
    return hasattr(model, "get_embedding_dimension") and hasattr(model, "encode")


def dimension(model) -> int:
    """Size of the vectors :func:`embed` returns for ``model``."""
    return int(model.get_embedding_dimension() if is_sentence_transformer(model) else model.config.hidden_size)


def pool(model, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """One vector per window. A sentence-transformers model applies its own modules (pooling, dense,
    normalisation: exactly what its ``encode`` computes for a text that fits one window); a plain
    encoder is mean-pooled over its real pieces."""
    if is_sentence_transformer(model):
        return model({"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)})[
            "sentence_embedding"
        ]
    hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1)


@torch.inference_mode()
def embed(
    model,
    tokenizer,
    texts: list[str],
    batch_size: int = 64,
    max_length: int = 256,
    progress: Callable | None = None,
    max_tokens: int = 2048,
) -> np.ndarray:
    """Unit-length mean-pooled embeddings [len(texts), hidden], length-sorted batches of at most
    ``batch_size`` windows and ``max_tokens`` padded pieces: long windows go in small batches, whose
    activations stay in cache (abstracts embed ~20% faster on a 2-core CPU than in batches of 32)."""
    for i, t in enumerate(texts, start=1):
        if not isinstance(t, str) or not t.strip():
            raise MinisciError(f"text {i}: empty text")
    body = max_length - 2
    pieces = tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]  # windowed below, not cut
    items = [
        (ti, [tokenizer.cls_token_id, *w, tokenizer.sep_token_id])
        for ti, ids in enumerate(pieces)
        for w in windows_of(ids, body)
    ]
    vecs = np.zeros((len(items), dimension(model)), dtype=np.float32)
    device = next(model.parameters()).device
    for idx in length_batches([len(ids) for _, ids in items], batch_size, max_tokens):
        longest = max(len(items[i][1]) for i in idx)
        ids = torch.full((len(idx), longest), tokenizer.pad_token_id)
        mask = torch.zeros_like(ids)
        for j, i in enumerate(idx):
            n = len(items[i][1])
            ids[j, :n] = torch.tensor(items[i][1])
            mask[j, :n] = 1
        vecs[idx] = pool(model, ids.to(device), mask.to(device)).float().cpu().numpy()
        if progress:
            progress(len(idx))
    out = np.zeros((len(texts), vecs.shape[1]), dtype=np.float32)
    for (ti, _), v in zip(items, vecs):
        out[ti] += v / max(np.linalg.norm(v), 1e-12)
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
