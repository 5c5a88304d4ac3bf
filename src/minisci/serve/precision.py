"""Inference precision: trade exactness for speed, and say what it costs.

- ``fp32``: the model as trained. Predictions are identical to the transformers pipeline's.
- ``bf16``: the encoder's Linear layers (~99% of its FLOPs on a sentence, 82% at 512 pieces) run
  in bfloat16: weights stored in bf16, activations cast at each layer's input, outputs back to
  float32. LayerNorm, softmax, residual sums, pooling and the task head stay in float32, which keeps
  predictions within a fraction of a percent of fp32 (``benchmarks/inference_speed.py`` measures
  it). Fast on GPUs and on CPUs whose bf16 matrix products outrun fp32 (a Zen 4's AVX512-BF16; AMX).
  Elsewhere it is slower: emulated where the CPU has no bf16 instructions, and at about half fp32's
  speed on an Intel Xeon with AVX512-BF16 but no AMX (measured). A probe of the model's own layer
  shape times both before converting, and a warning gives the ratio when bf16 is the slower.
- ``int8``: dynamic int8 quantisation of the encoder's Linear layers (weights per output channel,
  activations per batch; PyTorch's x86/fbgemm kernels, CPU only). The fastest on CPU, with a
  measurable change in predictions: check the benchmark's agreement and score columns first.

Only the encoder (``model.base_model``) is converted; task heads keep their float32 weights.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from minisci.bf16 import SLOWER, bf16_speed_ratio, native_bf16, why_slower
from minisci.errors import MinisciError
from minisci.serve.models import PRECISIONS

__all__ = ["PRECISIONS", "Bf16Linear", "apply_precision", "bf16_speed_ratio", "native_bf16"]


class Bf16Linear(nn.Module):
    """A Linear layer computed in bfloat16, taking and returning float32."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("weight", linear.weight.detach().to(torch.bfloat16))
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().to(torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x.to(torch.bfloat16), self.weight, self.bias).to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def _swap_linears(module: nn.Module) -> int:
    swapped = 0
    for name, child in module.named_children():
        if isinstance(child, nn.Linear):
            setattr(module, name, Bf16Linear(child))
            swapped += 1
        else:
            swapped += _swap_linears(child)
    return swapped


def _widest_linear(module: nn.Module) -> nn.Linear | None:
    linears = [m for m in module.modules() if isinstance(m, nn.Linear)]
    return max(linears, key=lambda m: m.in_features * m.out_features, default=None)


def apply_precision(model: nn.Module, precision: str) -> nn.Module:
    """Convert ``model``'s encoder in place to ``precision`` (see the module docstring); returns it."""
    if precision not in PRECISIONS:
        raise MinisciError(f"unknown precision {precision!r}; choose from {list(PRECISIONS)}")
    if precision == "fp32":
        return model
    encoder = getattr(model, "base_model", model)
    device = next(model.parameters()).device
    if precision == "bf16":
        widest = _widest_linear(encoder)
        if widest is None:
            raise MinisciError("--precision bf16: the model has no Linear layers to convert")
        if device.type == "cpu" and (ratio := bf16_speed_ratio(widest.in_features, widest.out_features)) < SLOWER:
            warnings.warn(
                f"--precision bf16 will be slower than fp32 on this CPU: its bf16 matrix products ran at {ratio:.2f}x "
                f"fp32's speed in a probe of the model's {widest.in_features}x{widest.out_features} layer ({why_slower()})",
                stacklevel=2,
            )
        _swap_linears(encoder)
        return model
    if device.type != "cpu":
        raise MinisciError("--precision int8 runs on CPU only (dynamic quantisation); use bf16 on a GPU")
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():  # torch.ao's eager quantisation API prints a migration notice on every call
        warnings.simplefilter("ignore")
        quantize_dynamic(encoder, {nn.Linear: per_channel_dynamic_qconfig}, inplace=True)
    return model
