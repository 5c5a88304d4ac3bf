"""ONNX Runtime as a peer: a transformers pipeline whose model is the ORT session of
:mod:`minisci.serve.onnx_backend` (the library's ``--backend onnx``: ``torch.onnx.export`` with dynamic
axes, ORT's full graph optimisation, optional dynamic int8), so minisci's own batching and the
pipeline's pre/post-processing stay the same and any difference in output is the runtime's.

A module imported by inference_speed.py, not a command.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path


def ort_pipelines(pipe, work_dir: Path, int8: bool = True) -> dict[str, object]:
    """Copies of ``pipe`` whose model is ONNX Runtime: ``{"ORT fp32": ..., "ORT int8": ...}``."""
    from minisci.serve.onnx_backend import OrtModel, export, quantize, session

    path = export(pipe.model, Path(work_dir) / "model.onnx")
    paths = {"ORT fp32": path} | ({"ORT int8": quantize(path)} if int8 else {})
    out = {}
    for label, p in paths.items():
        clone = copy.copy(pipe)
        clone.model = OrtModel(session(p), pipe.model.config)
        out[label] = clone
    return out


if __name__ == "__main__":
    print("onnx_peer.py is a module imported by the other benchmark scripts (inference_speed.py), not a command",
          file=sys.stderr)  # fmt: skip
    sys.exit(2)
