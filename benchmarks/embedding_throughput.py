"""Embedding throughput of `minisci index` vs the naive way (one document at a time, padded to 510).

Usage: python benchmarks/embedding_throughput.py [--model models/adapted] [--n 200]

Two workloads from the sampled corpus (data/corpus/documents.jsonl), measured in one run: --n single
sentences (titles, queries, citation-sized texts) and --n whole documents cut to 510 word pieces
(abstracts; both sides embed the same text). Ours: length-sorted batches, dynamic padding, inference
mode. Naive: each text alone, padded to 510, no batching. Prints texts/s, the ratio and the cosine
agreement of the two embeddings per workload.
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
        docs = [json.loads(line)["sentences"] for _, line in zip(range(args.n), f)]
    workloads = {
        "sentences": [d[0] for d in docs],
        "documents": [tok.decode(tok(" ".join(d), add_special_tokens=False)["input_ids"][:510]) for d in docs],
    }
    for name, texts in workloads.items():
        start = time.perf_counter()
        ours = embed(model, tok, texts, batch_size=32, max_length=512)
        t_ours = time.perf_counter() - start
        start = time.perf_counter()
        ref = naive(model, tok, texts)
        t_naive = time.perf_counter() - start
        mean_len = np.mean([len(tok(t)["input_ids"]) for t in texts])
        print(f"{name:9s}: {len(texts)} texts, mean {mean_len:3.0f} word pieces | ours {len(texts) / t_ours:7.1f}/s | "
              f"naive (padded to 512) {len(texts) / t_naive:6.1f}/s | ratio {t_naive / t_ours:5.1f}x | "
              f"min cosine(ours, naive) {np.min(np.sum(ours * ref, 1)):.5f}")


if __name__ == "__main__":
    main()
