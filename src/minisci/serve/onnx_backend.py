"""ONNX Runtime as an inference backend (``minisci ner|cite --backend onnx``).

The task model is exported once with ``torch.onnx.export`` (dynamic batch and sequence axes) and run
with ORT's full graph optimisation on the CPU; ``--precision int8`` adds ORT's dynamic int8
quantisation of the exported graph. The export is cached under ``$MINISCI_CACHE/onnx`` (default
``$XDG_CACHE_HOME/minisci/onnx``, else ``~/.cache/minisci/onnx``) keyed by the model's files and the torch and
onnxruntime versions, so a second call starts at once. Only the forward changes: tokenisation,
windowing, length-sorted batching, the CRF's constrained Viterbi and the pipeline's post-processing
are minisci's own, so any difference in output is the runtime's (``benchmarks/inference_speed.py``
prints the agreement with the fp32 PyTorch output).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch

from minisci.errors import MinisciError

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
BACKENDS = ("torch", "onnx")
ONNX_PRECISIONS = ("fp32", "int8")


class _Logits(torch.nn.Module):
    """The task model with a plain tensor output, which is what the exporter traces best."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return out.logits


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
            _Logits(model).eval(),  # an eval-mode wrapper: the exporter restores the wrapper's mode afterwards
            example,
            str(path),
            input_names=list(INPUTS),
            output_names=["logits"],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )
    return path


def quantize(path: Path, out: Path | None = None) -> Path:
    """Dynamic int8 quantisation of the exported graph's matrix products (weights int8, activations per batch)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out = out or path.with_name(path.stem + ".int8.onnx")
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
    """Enough of a transformers model for minisci's batched forward: ``device``, ``config``, ``crf``
    (a CRF head stays in PyTorch: only its emissions come from ORT) and ``(**batch).logits``."""

    device = torch.device("cpu")

    def __init__(self, sess, config, crf=None):
        self.session, self.config, self.crf = sess, config, crf

    def forward(self, **batch):
        """Logits as a transformers ``ModelOutput`` (``.logits``, ``["logits"]`` and ``[0]`` all work), so
        the model also serves inside a plain ``pipeline`` (used as a peer by the benchmarks)."""
        from transformers.modeling_outputs import SequenceClassifierOutput

        feeds = {k: batch[k].cpu().numpy().astype(np.int64) for k in INPUTS if k in batch}
        if "token_type_ids" not in feeds:
            feeds["token_type_ids"] = np.zeros_like(feeds["input_ids"])
        return SequenceClassifierOutput(logits=torch.from_numpy(self.session.run(["logits"], feeds)[0]))

    __call__ = forward


def cache_dir() -> Path:
    if os.environ.get("MINISCI_CACHE"):
        return Path(os.environ["MINISCI_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "minisci"


def _model_key(model_dir: Path, precision: str) -> str:
    import onnxruntime

    h = hashlib.sha256(f"{torch.__version__}|{onnxruntime.__version__}|{precision}".encode())
    for f in sorted(p for p in model_dir.iterdir() if p.is_file() and p.suffix in (".json", ".safetensors")):
        h.update(f.name.encode())
        with f.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:24]


def exported(model, model_dir: str | Path, precision: str = "fp32") -> Path:
    """The ONNX file of ``model`` (loaded from ``model_dir``) at ``precision``, exported on first use
    into the cache and reused while the model's files are unchanged. Written atomically: an
    interrupted export leaves nothing behind."""
    root = cache_dir() / "onnx"
    target = root / f"{_model_key(Path(model_dir), precision)}.onnx"
    if target.is_file():
        return target
    try:
        root.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".export-", dir=root))
    except OSError as e:
        raise MinisciError(
            f"--backend onnx: cannot write the export cache {root} ({e.strerror}); set MINISCI_CACHE"
        ) from None
    try:
        path = export(model, work / "model.onnx")
        if precision == "int8":
            path = quantize(path, work / "model.int8.onnx")
        os.replace(path, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def cached_session(model, model_dir: str | Path, precision: str):
    """A session on the cached export, exported again if the cached file is damaged (a disk that
    filled up, a copy cut short): the cache is minisci's own, rebuilt rather than failing every run."""
    path = exported(model, model_dir, precision)
    try:
        return session(path)
    except Exception:  # onnxruntime's own error types (InvalidProtobuf, Fail, ...)
        path.unlink(missing_ok=True)
        return session(exported(model, model_dir, precision))


def check_onnx(precision: str) -> None:
    """Refuse what ``--backend onnx`` cannot run before any model is loaded."""
    if precision not in ONNX_PRECISIONS:
        raise MinisciError(f"--backend onnx runs --precision {' or '.join(ONNX_PRECISIONS)}, not {precision}")
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        raise MinisciError("--backend onnx needs onnxruntime: pip install onnxruntime onnx") from None


def use_onnx(pipe, model_dir: str | Path, precision: str):
    """``pipe`` with its model's forward run by ONNX Runtime (fp32 or dynamic int8), in place."""
    check_onnx(precision)
    if pipe.model.device.type != "cpu":
        raise MinisciError("--backend onnx runs on CPU; use --backend torch on a GPU")
    model = pipe.model
    pipe.model = OrtModel(cached_session(model, model_dir, precision), model.config, getattr(model, "crf", None))
    return pipe
