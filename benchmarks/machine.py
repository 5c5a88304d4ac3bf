"""The machine a benchmark ran on, printed at the top of every benchmark: ratios mean little without it.

CPU model and the flags that decide bf16/int8 speed (AVX-512, AVX512-BF16, AMX), what oneDNN and
PyTorch's CPU dispatch make of them, library versions and the thread count.
"""

from __future__ import annotations

import platform

import torch

from minisci.training import cpu_info

FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_tile", "amx_int8")


def machine_lines() -> list[str]:
    import transformers

    model, flags = cpu_info()
    present = {f: ("yes" if f in flags else "no") for f in FLAGS}
    mkldnn = torch.backends.mkldnn.is_available()
    bf16 = mkldnn and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    lines = [
        f"machine: {model or platform.processor() or 'unknown CPU'} | "
        + " ".join(f"{f}={v}" for f, v in present.items()),
        f"  torch {torch.__version__} (CPU capability {torch.backends.cpu.get_cpu_capability()}, "
        f"mkldnn {'on' if mkldnn else 'off'}, oneDNN native bf16 {'yes' if bf16 else 'no'}) | "
        f"transformers {transformers.__version__} | {torch.get_num_threads()} threads",
    ]
    for name in ("onnxruntime", "sentence_transformers"):
        try:
            lines[-1] += f" | {name} {__import__(name).__version__}"
        except ImportError:
            pass
    return lines


def print_machine() -> None:
    print("\n".join(machine_lines()), flush=True)


def positive_int(text: str) -> int:
    """An argparse type for counts (steps, rounds, batch sizes, texts): an int >= 1, else a one-line usage error."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def positive_rate(text: str) -> float:
    """An argparse type for a rate (GFLOP/s): a finite number > 0, else a one-line usage error."""
    import argparse
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text}")
    return value


def positive_float(text: str) -> float:
    """An argparse type for amounts (epochs): a number > 0, else a one-line usage error."""
    import argparse

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text}")
    return value
