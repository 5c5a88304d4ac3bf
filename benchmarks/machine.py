"""The machine a benchmark ran on, printed at the top of every benchmark: ratios mean little without it.

CPU model and the flags that decide bf16/int8 speed (AVX-512, AVX512-BF16, AMX), what oneDNN and
PyTorch's CPU dispatch make of them, library versions and the thread count. Also what the scripts'
command lines share: the argparse types for counts and rates, and the help formatter.

A module imported by the other benchmark scripts, not a command. It imports torch only when the
machine lines are printed, so that a script's ``--help`` and usage errors come before torch's seconds
of import.
"""

from __future__ import annotations

import argparse
import platform
import sys
import textwrap

FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_tile", "amx_int8")


def machine_lines() -> list[str]:
    import torch
    import transformers

    from minisci.training import cpu_info

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
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def positive_rate(text: str) -> float:
    """An argparse type for a rate (GFLOP/s): a finite number > 0, else a one-line usage error."""
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
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text}")
    return value


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """``--help`` with each option's default after its help text, and the description as written. No
    ``(default: None)`` or ``(default: False)``: an option without a default, or a switch, says nothing.
    Lines break between words only, not at hyphens, so a default path (``/work/minisci-2/...``) reads whole."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


if __name__ == "__main__":
    print(
        "machine.py is a module imported by the other benchmark scripts (compare_runs.py, corpus_scale.py, "
        "embedding_throughput.py, finetune_cpu_side.py, finetune_throughput.py, gpu_profile.py, inference_speed.py, "
        "long_documents.py, paper_cpu_stages.py, pretrain_throughput.py, ranges.py, run_floor.py), not a command",
        file=sys.stderr,
    )
    sys.exit(2)
