"""The training variants finetune_throughput.py compares, which subclass torch's and transformers' own
classes: bf16 matrix products emulated on the fp32 kernels (``--emulated-bf16``), length-grouped batches
in shuffled order (``--shuffled-groups``) and the dev curve (``--eval-every``).

A module imported by finetune_throughput.py, after it has parsed its arguments (so that its ``--help``
and usage errors do not wait for torch and transformers), not a command.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":  # before torch is imported: saying so took 11 s
    print("finetune_variants.py is a module imported by the other benchmark scripts (finetune_throughput.py), "
          "not a command", file=sys.stderr)  # fmt: skip
    sys.exit(2)

import contextlib  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from transformers import TrainerCallback  # noqa: E402

from minisci.finetune.common import WeightedLossTrainer  # noqa: E402


class EmulatedBf16Gemms(TorchDispatchMode):
    """Inside ``torch.autocast(dtype=bfloat16)``: its matrix products computed as native bf16 hardware
    (AVX512-BF16, AMX) computes them, on the fp32 kernels. The bf16 inputs are upcast exactly, their products
    are exact in fp32 (8-bit significands), the sums are fp32 and the result is rounded to bf16. Which ops
    run in bf16, and every other op, stay autocast's own (this mode sits below autocast and autograd, so
    the backward pass's products are covered too). Only the CPU's slow emulated bf16 GEMM is replaced."""

    GEMMS = frozenset({torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default})
    GEMMS |= {torch.ops.aten.baddbmm.default}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in self.GEMMS or not any(_is_bf16(a) for a in args):
            return func(*args, **kwargs)
        out = func(*(_upcast(a) for a in args), **{k: _upcast(v) for k, v in kwargs.items()})
        return out.to(torch.bfloat16)


def _is_bf16(value) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype == torch.bfloat16


def _upcast(value):
    return value.float() if _is_bf16(value) else value


def emulation_check(model, batch: dict) -> str:
    """One step's gradients (dropout off) in fp32, in the CPU's own bf16 autocast and in emulated bf16:
    how far each bf16 moves them from fp32, relative to their norm. Alike means the emulation's drift
    stands for bf16's."""
    model.eval()  # no dropout: the three passes see the same network

    def grads(emulated: bool | None) -> torch.Tensor:
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=emulated is not None):
            with EmulatedBf16Gemms() if emulated else contextlib.nullcontext():
                model(**batch).loss.backward()
        return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])

    fp32, native, emulated = grads(None), grads(False), grads(True)
    model.zero_grad()

    def rel(g: torch.Tensor) -> float:
        return float((g - fp32).norm() / fp32.norm())

    return (
        f"  emulation check, one step's gradients against fp32: the CPU's own bf16 autocast {rel(native):.2%}, "
        f"emulated bf16 {rel(emulated):.2%}; the two against each other {float((native - emulated).norm() / fp32.norm()):.2%}"
    )


class ShuffledBatches(torch.utils.data.Sampler):
    """Another sampler's order cut into batches, the batches shuffled (torch's seeded global generator,
    as the Trainer's own samplers use), a last partial batch kept last so that the loader's batches are
    still the cut ones."""

    def __init__(self, inner, batch_size: int):
        self.inner, self.batch_size = inner, batch_size

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self):
        order = list(self.inner)
        batches = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        tail = batches.pop() if batches and len(batches[-1]) < self.batch_size else []
        for k in torch.randperm(len(batches)).tolist():
            yield from batches[k]
        yield from tail


class ShuffledGroupsTrainer(WeightedLossTrainer):
    """Ours, with its length-grouped batches in shuffled order."""

    def _get_train_sampler(self, train_dataset=None):
        batch = self.args.train_batch_size * self.args.gradient_accumulation_steps
        return ShuffledBatches(super()._get_train_sampler(train_dataset), batch)


class DevCurve(TrainerCallback):
    """A Trainer callback: the dev score every ``every`` steps and after the last, with the training
    seconds until then. The clock pauses while dev is scored: ``excluded`` is the scoring time, which
    :func:`timed_run` takes off the side's training time."""

    def __init__(self, every: int, score: Callable):
        self.every, self.score = every, score
        self.points: list[tuple[int, float, float]] = []  # (step, training seconds, dev score)
        self.start = self.excluded = 0.0

    def on_train_begin(self, args, state, control, **kwargs):
        self.start, self.excluded, self.points = time.perf_counter(), 0.0, []

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.every and state.global_step != state.max_steps:
            return
        paused = time.perf_counter()
        dev = self.score(model)
        model.train()  # scoring switched it to eval
        self.points.append((state.global_step, paused - self.start - self.excluded, dev))
        self.excluded += time.perf_counter() - paused
