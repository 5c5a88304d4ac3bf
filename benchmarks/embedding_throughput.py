"""Embedding throughput of `minisci index` vs the naive way (one document at a time, padded to 510).

Usage: python benchmarks/embedding_throughput.py [--model models/adapted/13] [--n 200]

Two workloads from the sampled corpus (data/corpus/documents.jsonl), measured in one run: --n single
sentences (titles, queries, citation-sized texts) and --n whole documents cut to 510 word pieces
(abstracts; both sides embed the same text). Ours: length-sorted batches of at most --batch-size
texts and --max-tokens padded pieces, inference mode, at each --precision (see minisci.serve.precision),
and once more in fp32 without the cap on pieces. Naive: each text alone in float32, padded to 510,
no batching. Peer: ``SentenceTransformer.encode(batch_size=32)`` on the same encoder with mean pooling
(built as finetune/embeddings.py builds it), the fast way a user would pick. Prints texts/s, the ratio and the cosine between each embedding and the naive one, ours against the peer too, and
the highest ratio any implementation could reach on this CPU, in fp32 and in bf16 (see roofline.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from machine import HelpFormatter, positive_int, print_machine

from minisci.serve.models import PRECISIONS  # torch-free: --help and usage errors come first
from minisci.stage import run_command

REPO = Path(__file__).resolve().parents[1]  # default inputs are this checkout's, from any folder


def naive(model, tok, texts: list[str]):
    """Each text alone, padded to 512, mean-pooled and normalised: an array, one row per text."""
    import numpy as np
    import torch

    out = []
    with torch.no_grad():
        for t in texts:
            enc = tok(t, padding="max_length", truncation=True, max_length=512, return_tensors="pt")
            h = model(**enc).last_hidden_state
            m = enc["attention_mask"].unsqueeze(-1).float()
            v = ((h * m).sum(1) / m.sum(1))[0].numpy()
            out.append(v / np.linalg.norm(v))
    return np.stack(out)


def sentence_transformer(model_dir: str, max_length: int = 512):
    """The encoder as sentence-transformers users run it: a Transformer module and mean pooling."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    word = Transformer(str(model_dir), max_seq_length=max_length)
    return SentenceTransformer(
        modules=[word, Pooling(word.get_embedding_dimension(), pooling_mode="mean")], device="cpu"
    )


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=HelpFormatter)
    p.add_argument("--model", default=str(REPO / "models/adapted/13"), help="the encoder directory")
    p.add_argument(
        "--docs", default=str(REPO / "data/corpus/documents.jsonl"), help="the sampled corpus (sample_corpus)"
    )
    p.add_argument("--n", type=positive_int, default=200, help="texts per workload (sentences, documents)")
    p.add_argument("--batch-size", type=positive_int, default=32, help="ours: texts per batch at most")
    p.add_argument(
        "--max-tokens",
        type=positive_int,
        default=2048,
        help="ours: padded word pieces per batch at most (minisci index's default)",
    )
    p.add_argument("--peer-batch-size", type=positive_int, default=32, help="SentenceTransformer.encode's batch_size")
    p.add_argument(
        "--precisions", nargs="+", choices=PRECISIONS, default=list(PRECISIONS), help="ours: the precisions to time"
    )
    args = p.parse_args(argv)
    import numpy as np
    from roofline import ceiling_line
    from transformers.utils import logging as hf_logging

    from minisci.encoding import embed
    from minisci.serve.search import load_encoder

    hf_logging.set_verbosity_error()  # load reports of encoders saved with pretraining heads
    hf_logging.disable_progress_bar()

    print_machine()
    model, tok = load_encoder(args.model)
    st = sentence_transformer(args.model)
    encoders = {precision: load_encoder(args.model, precision)[0] for precision in args.precisions}
    with open(args.docs, encoding="utf-8") as f:
        docs = [json.loads(line)["sentences"] for _, line in zip(range(args.n), f)]
    workloads = {
        "sentences": [d[0] for d in docs],
        "documents": [tok.decode(tok(" ".join(d), add_special_tokens=False)["input_ids"][:510]) for d in docs],
    }
    for name, texts in workloads.items():
        start = time.perf_counter()
        ref = naive(model, tok, texts)
        t_naive = time.perf_counter() - start
        lengths = [len(tok(t)["input_ids"]) for t in texts]
        print(
            f"{name}: {len(texts)} texts, mean {np.mean(lengths):3.0f} word pieces | naive (fp32, one at a time, "
            f"padded to 512) {len(texts) / t_naive:6.1f}/s"
        )
        print(ceiling_line(model.config, lengths, t_naive))
        start = time.perf_counter()
        peer = st.encode(texts, batch_size=args.peer_batch_size, normalize_embeddings=True, convert_to_numpy=True)
        t_peer = time.perf_counter() - start
        cos = np.sum(peer * ref, 1)
        print(
            f"  peer SentenceTransformer.encode(batch_size={args.peer_batch_size}): {len(texts) / t_peer:7.1f}/s | "
            f"ratio {t_naive / t_peer:5.1f}x | cosine to naive: min {cos.min():.5f}, mean {cos.mean():.5f}",
            flush=True,
        )
        runs = [(precision, encoder, args.max_tokens) for precision, encoder in encoders.items()]
        if "fp32" in encoders:  # what the cap on padded pieces per batch buys
            runs.append(("fp32, batches not capped in pieces", encoders["fp32"], 10**9))
        for label, encoder, max_tokens in runs:
            start = time.perf_counter()
            ours = embed(encoder, tok, texts, batch_size=args.batch_size, max_length=512, max_tokens=max_tokens)
            t_ours = time.perf_counter() - start
            cos, cos_peer = np.sum(ours * ref, 1), np.sum(ours * peer, 1)
            print(
                f"  ours {label}: {len(texts) / t_ours:7.1f}/s | ratio {t_naive / t_ours:5.1f}x | "
                f"vs peer {t_peer / t_ours:4.2f}x | cosine to naive: min {cos.min():.5f}, mean {cos.mean():.5f} | "
                f"to peer: min {cos_peer.min():.5f}",
                flush=True,
            )


if __name__ == "__main__":
    sys.exit(run_command(main))  # a missing model, data or params file: one line, exit 1
