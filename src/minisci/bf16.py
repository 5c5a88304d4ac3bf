"""Whether bf16 pays on this CPU: oneDNN's check for native bf16, and a timed probe of one layer shape.

bf16 matrix products outrun fp32 on GPUs, on a Zen 4's AVX512-BF16 and on AMX. Elsewhere they are
slower: emulated where the CPU has no bf16 instructions, and at about half fp32's speed on an Intel
Xeon with AVX512-BF16 but no AMX (measured: fine-tuning there trains at 0.71x fp32). The probe times
both precisions on the layer shape that dominates a model's work, so a warning can give the ratio.
``minisci --precision bf16`` (serving) and the pipeline's check of the training sections'
``precision: bf16`` (the code_fingerprint stage, before any other stage runs) use it.
"""

from __future__ import annotations

import time

import torch
from torch import nn

SLOWER = 0.9  # bf16 below this fraction of fp32's speed in the probe is reported (the probe's noise is a few %)


def native_bf16() -> bool:
    """Whether this CPU computes bf16 matrix products natively (oneDNN's check)."""
    return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())


def bf16_speed_ratio(in_features: int, out_features: int, rows: int = 256, repeats: int = 5) -> float:
    """fp32 time / bf16 time of one ``rows`` x ``in_features`` -> ``out_features`` linear on this CPU (the best of
    ``repeats`` each, after a warm-up): above 1 bf16 is the faster. Tens of milliseconds where bf16 is native
    (28 ms for MiniLM's widest layer, 94 ms for BERT-base's, on a 2-core Xeon), longer where it is emulated."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(rows, in_features, generator=gen)
    w = torch.randn(out_features, in_features, generator=gen)
    pairs = {dtype: (x.to(dtype), w.to(dtype)) for dtype in (torch.float32, torch.bfloat16)}
    best = dict.fromkeys(pairs, float("inf"))
    for xd, wd in pairs.values():
        nn.functional.linear(xd, wd)  # warm-up: oneDNN picks and builds its kernel
    for _ in range(repeats):  # interleaved, so that other work on the machine slows both alike
        for dtype, (xd, wd) in pairs.items():
            start = time.perf_counter()
            nn.functional.linear(xd, wd)
            best[dtype] = min(best[dtype], time.perf_counter() - start)
    return best[torch.float32] / max(best[torch.bfloat16], 1e-9)


def why_slower() -> str:
    """What the CPU's bf16 is, for a warning that it is the slower."""
    return "emulated: no native bf16" if not native_bf16() else "native bf16, slower than fp32 here"
