"""The ceiling on an exact (float32) speed-up on this machine, measured in the same run as the ratio.

Any float32 implementation of a BERT forward has to do the model's matrix products. Counting only
those (the Linear layers and the two attention products, over each text's real length, no padding)
and dividing by the fastest float32 matrix product this CPU runs right now gives a lower bound on
the time of *any* exact implementation: no tokenisation, no layer norm, no post-processing, no
padding, every product at peak. The reference's time divided by that bound is the highest ratio an
exact implementation could print; a target above it needs fewer or cheaper (lower-precision) FLOPs.
"""

from __future__ import annotations

import time

import torch


def encoder_flops(config, lengths) -> float:
    """Floating-point operations of a BERT encoder's matrix products over texts of these lengths
    (word pieces, special tokens included): per layer Q, K, V, output (4·d²), the feed-forward
    (2·d·intermediate) and QKᵀ, attention·V (2·L·d) multiply-adds per token; 2 FLOPs each."""
    d, inter, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    return float(sum(layers * 2 * n * (4 * d * d + 2 * d * inter + 2 * n * d) for n in lengths))


@torch.inference_mode()
def peak_matmul_flops(config, windows: int = 5, seconds: float = 0.1) -> float:
    """The best float32 FLOP/s of this CPU's matrix products in the encoder's own shapes, measured now
    (best window of each shape, so a busy moment lowers the peak less, and the ceiling is not too low)."""
    d, inter = config.hidden_size, config.intermediate_size
    best = 0.0
    for rows in (256, 1024):
        for k, n in ((d, inter), (inter, d), (d, d)):
            x, w = torch.randn(rows, k), torch.randn(n, k)
            for _ in range(3):
                torch.nn.functional.linear(x, w)
            for _ in range(windows):
                calls, start = 0, time.perf_counter()
                while (elapsed := time.perf_counter() - start) < seconds:
                    torch.nn.functional.linear(x, w)
                    calls += 1
                best = max(best, 2 * rows * k * n * calls / elapsed)
    return best


def ceiling_line(config, lengths, t_reference: float) -> str:
    peak, flops = peak_matmul_flops(config), encoder_flops(config, lengths)
    bound = flops / peak
    return (f"  exact fp32 ceiling: {flops / 1e9:,.1f} GFLOP of matrix products at this CPU's peak "
            f"{peak / 1e9:.0f} GFLOP/s (measured now) take {bound:.2f} s: at most {t_reference / bound:4.2f}x")
