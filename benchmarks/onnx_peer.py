"""ONNX Runtime as a peer (and a candidate backend): a task model exported with ``torch.onnx.export``
(dynamic batch and sequence axes), run with ORT's full graph optimisation, optionally with dynamic int8
quantisation (``onnxruntime.quantization``). :func:`ort_pipeline` swaps the model of a transformers
pipeline for the ORT session, so minisci's own batching and the pipeline's pre/post-processing stay the
same and any difference in output is the runtime's.
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class _Logits(torch.nn.Module):
    """The task model with a plain tensor output, which is what the exporter traces best."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits


def export(model, path: Path) -> Path:
    """``model`` (a float32 BERT task model) as ONNX at ``path``, batch and sequence axes dynamic."""
    ids = torch.ones(2, 8, dtype=torch.long)
    example = (ids, torch.ones_like(ids), torch.zeros_like(ids))
    axes = {k: {0: "batch", 1: "sequence"} for k in INPUTS}
    with torch.no_grad():  # token classification has a sequence axis in its logits, text classification not
        per_token = model.eval()(input_ids=ids).logits.dim() == 3
    axes["logits"] = {0: "batch", 1: "sequence"} if per_token else {0: "batch"}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _Logits(model.eval()),
            example,
            str(path),
            input_names=list(INPUTS),
            output_names=["logits"],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )
    return path


def quantize(path: Path) -> Path:
    """Dynamic int8 quantisation of the exported graph's matrix products (weights int8, activations per batch)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out = path.with_name(path.stem + ".int8.onnx")
    quantize_dynamic(str(path), str(out), weight_type=QuantType.QInt8)
    return out


def session(path: Path):
    """An ORT CPU session with every graph optimisation on and torch's thread count."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = torch.get_num_threads()
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


class OrtModel:
    """Enough of a transformers model for minisci's batched forward: ``device``, ``config``, ``(**batch).logits``."""

    crf = None
    device = torch.device("cpu")

    def __init__(self, sess, config):
        self.session, self.config = sess, config

    def __call__(self, **batch):
        feeds = {k: batch[k].numpy().astype(np.int64) for k in INPUTS if k in batch}
        if "token_type_ids" not in feeds:
            feeds["token_type_ids"] = np.zeros_like(feeds["input_ids"])
        return SimpleNamespace(logits=torch.from_numpy(self.session.run(["logits"], feeds)[0]))


def ort_pipelines(pipe, work_dir: Path, int8: bool = True) -> dict[str, object]:
    """Copies of ``pipe`` whose model is ONNX Runtime: ``{"ORT fp32": ..., "ORT int8": ...}``."""
    path = export(pipe.model, Path(work_dir) / "model.onnx")
    paths = {"ORT fp32": path} | ({"ORT int8": quantize(path)} if int8 else {})
    out = {}
    for label, p in paths.items():
        clone = copy.copy(pipe)
        clone.model = OrtModel(session(p), pipe.model.config)
        out[label] = clone
    return out
