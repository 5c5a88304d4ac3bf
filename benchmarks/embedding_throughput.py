"""Embedding throughput of `minisci index` vs the naive way (one document at a time, padded to 510).

Usage: python benchmarks/embedding_throughput.py [--model models/adapted] [--n 200]

Documents: the first --n sampled corpus documents (data/corpus/documents.jsonl), cut to 510 word
pieces for both sides so they embed the same text. Ours: length-sorted batches, dynamic padding,
inference mode. Naive: each document alone, padded to 510, no batching. Prints docs/s, the ratio,
and the cosine agreement of the two embeddings.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from minisci.embeddings import embed, load_encoder


def naive(model, tok, texts: list[str]) -> np.ndarray:
    out = []
    with torch.no_grad():
        for t in texts:
            enc = tok(t, padding="max_length", truncation=True, max_length=512, return_tensors="pt")
            h = model(**enc).last_hidden_state
            m = enc["attention_mask"].unsqueeze(-1).float()
            v = ((h * m).sum(1) / m.sum(1))[0].numpy()
            out.append(v / np.linalg.norm(v))
    return np.stack(out)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="models/adapted")
    p.add_argument("--docs", default="data/corpus/documents.jsonl")
    p.add_argument("--n", type=int, default=200)
    args = p.parse_args(argv)

    model, tok = load_encoder(args.model)
    with open(args.docs, encoding="utf-8") as f:
        raw = [" ".join(json.loads(line)["sentences"]) for _, line in zip(range(args.n), f)]
    texts = [tok.decode(tok(t, add_special_tokens=False)["input_ids"][:510]) for t in raw]  # same text both sides
    start = time.perf_counter()
    ours = embed(model, tok, texts, batch_size=32, max_length=512)
    t_ours = time.perf_counter() - start
    start = time.perf_counter()
    ref = naive(model, tok, texts)
    t_naive = time.perf_counter() - start
    lengths = [len(tok(t)["input_ids"]) for t in texts]
    print(f"{len(texts)} documents, mean {np.mean(lengths):.0f} word pieces (padded to 512 by the naive way)")
    print(f"ours  {len(texts) / t_ours:7.1f} docs/s | naive {len(texts) / t_naive:7.1f} docs/s | ratio {t_naive / t_ours:.1f}x")
    print(f"cosine(ours, naive): min {np.min(np.sum(ours * ref, 1)):.5f}")


if __name__ == "__main__":
    main()
