"""The ceiling on an exact (float32) speed-up on this machine, measured in the same run as the ratio.

Any float32 implementation of a BERT forward has to do the model's matrix products. Counting only
those (the Linear layers and the two attention products, over each text's real length, no padding)
and dividing by the fastest float32 matrix product this CPU runs right now gives a lower bound on
the time of *any* exact implementation: no tokenisation, no layer norm, no post-processing, no
padding, every product at peak. The reference's time divided by that bound is the highest ratio an
exact implementation could print; a target above it needs fewer or cheaper (lower-precision) FLOPs.
The same bound with the peak bfloat16 rate is printed beside it.

A module imported by the other benchmark scripts, not a command. torch is imported where a rate is
measured, so that a script importing it still answers ``--help`` at once (and gpu_check.py's count,
:func:`encoder_flops`, needs none).
"""

from __future__ import annotations

import sys
import time


def encoder_flops(config, lengths) -> float:
    """Floating-point operations of a BERT encoder's matrix products over texts of these lengths
    (word pieces, special tokens included): per layer Q, K, V, output (4·d²), the feed-forward
    (2·d·intermediate) and QKᵀ, attention·V (2·L·d) multiply-adds per token; 2 FLOPs each."""
    d, inter, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    return float(sum(layers * 2 * n * (4 * d * d + 2 * d * inter + 2 * n * d) for n in lengths))


def peak_matmul_flops(config, dtype, windows: int = 5, seconds: float = 0.1) -> float:
    """The best FLOP/s of this CPU's matrix products in ``dtype`` (a torch dtype) and the encoder's own
    shapes, measured now (best window of each shape, so a busy moment lowers the peak less, and the
    ceiling is not too low)."""
    import torch

    d, inter = config.hidden_size, config.intermediate_size
    best = 0.0
    with torch.inference_mode():
        for rows in (256, 1024):
            for k, n in ((d, inter), (inter, d), (d, d)):
                x, w = torch.randn(rows, k, dtype=dtype), torch.randn(n, k, dtype=dtype)
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
    """One line: the matrix-product FLOPs of these inputs, and the highest ratio over ``t_reference`` that
    an implementation doing only those products at this CPU's peak could reach, exactly (fp32) and in
    bfloat16 (see minisci.serve.precision)."""
    import torch

    flops = encoder_flops(config, lengths)
    parts = []
    for name, dtype in (("exact fp32", torch.float32), ("bf16", torch.bfloat16)):
        peak = peak_matmul_flops(config, dtype)
        parts.append(f"{name} {peak / 1e9:.0f} GFLOP/s: at most {t_reference * peak / flops:4.2f}x")
    return (
        f"  ceiling: {flops / 1e9:,.1f} GFLOP of matrix products at this CPU's peak rates (measured now); "
        + "; ".join(parts)
    )


if __name__ == "__main__":
    print(
        "roofline.py is a module imported by the other benchmark scripts (embedding_throughput.py, "
        "gpu_check.py, inference_speed.py, pretrain_throughput.py, run_floor.py), not a command",
        file=sys.stderr,
    )
    sys.exit(2)
