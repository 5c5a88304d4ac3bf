"""Model directories, checked before use, and the options that choose how a model runs.

A model is read only after its directory has been checked against the task: ``config.json`` parses,
the architecture and the label map fit the command (a citation classifier is not an NER tagger, and a
bare encoder has no trained head), and the weights are safetensors (``pytorch_model.bin`` is pickle
and is refused). Library exceptions raised while loading (transformers' ``OSError`` for a missing or
broken file, ``ValueError``) become one-line :class:`MinisciError` messages naming the directory.

This module imports no torch or transformers at import time, so ``minisci --help`` stays fast.
"""

from __future__ import annotations

import json
import re
from contextlib import contextmanager
from pathlib import Path

from minisci.errors import DataFormatError, MinisciError
from minisci.tasks.kind import TaskKind

PRECISIONS = ("fp32", "bf16", "int8")
DEVICES = ("auto", "cpu", "cuda")
MIN_LENGTH = 8  # [CLS] + [SEP] + a few pieces; below this every window is nearly empty

GENERIC_LABEL = re.compile(r"LABEL_\d+")


def model_path(model_dir, what: str = "model_dir") -> Path:
    """``model_dir`` as a path; anything but a path or a string (``None``) is a one-line error."""
    if not isinstance(model_dir, (str, Path)) or not str(model_dir):
        raise MinisciError(f"{what}: expected a directory (str or Path), got {model_dir!r}")
    return Path(model_dir)


def read_config(model_dir: str | Path) -> dict:
    """``config.json`` of a model directory, parsed; a missing or broken file is a one-line error."""
    path = model_path(model_dir)
    if not path.is_dir():
        raise MinisciError(f"{path}: not a model directory (no such directory); {_missing_hint(path)}")
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise MinisciError(f"{path}: not a model directory (no config.json); {_missing_hint(path)}")
    try:
        config = json.loads(cfg_file.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise DataFormatError(cfg_file, None, f"not UTF-8 (byte offset {e.start})") from None
    except json.JSONDecodeError as e:
        raise DataFormatError(cfg_file, e.lineno, f"invalid JSON, truncated? ({e.msg})") from None
    if not isinstance(config, dict):
        raise DataFormatError(cfg_file, None, "expected a JSON object")
    return config


def _missing_hint(path: Path) -> str:
    """What to do about a model directory that is not there. The path was given (``--model`` or an
    argument), so the hint is never "pass --model"; after the quick profile the README's BC5CDR paths
    do not exist, so the models of the same kind that do exist are named
    (``models/finetune_ner/ncbi_disease/adapted`` for ``models/finetune_ner/bc5cdr/adapted``)."""
    siblings = sorted(
        str(p) for p in path.parent.parent.glob(f"*/{path.name}") if p != path and (p / "config.json").is_file()
    )
    if siblings:
        return "models that exist: " + ", ".join(siblings[:4])
    return "check the path, or run `dvc repro` to train it"


def check_weights(model_dir: str | Path) -> None:
    """Safetensors weights only: a directory holding only pickle weights is refused, not unpickled."""
    path = Path(model_dir)
    if (path / "model.safetensors").is_file() or (path / "model.safetensors.index.json").is_file():
        return
    if any(path.glob("pytorch_model*.bin")):
        raise MinisciError(
            f"{path}: only pytorch_model.bin (pickle) weights; minisci loads safetensors only "
            "(re-save the model with save_pretrained(..., safe_serialization=True))"
        )
    raise MinisciError(f"{path}: no model weights (model.safetensors)")


HEAD_OUTPUTS = ("classifier.bias", "classifier.out_proj.bias", "crf.transitions", "crf.start", "crf.end")


def check_head(model_dir: str | Path, config: dict) -> None:
    """The head in ``model.safetensors`` has one output per label of ``config.json``, read from the
    file's header alone (no weight is loaded), so a label map replaced after training is one line
    before a server starts, as it is when the model loads. Sharded weights are checked as they load."""
    path = Path(model_dir)
    weights = path / "model.safetensors"
    if not weights.is_file():
        return
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(weights), framework="numpy") as f:
            shapes = {k: list(f.get_slice(k).get_shape()) for k in f.keys() if k.endswith(HEAD_OUTPUTS)}
    except (SafetensorError, OSError) as e:
        raise MinisciError(f"{weights}: not a readable safetensors file ({' '.join(str(e).split())})") from None
    n = len(config["id2label"]) if config.get("id2label") else config.get("num_labels")
    if not isinstance(n, int):
        return
    wrong = [(k, shape, [n, *shape[1:]]) for k, shape in shapes.items() if shape[:1] != [n]]
    if wrong:
        raise MinisciError(mismatch_message(path, n, wrong))


def check_task(model_dir: str | Path, config: dict, kind: TaskKind) -> None:
    """Refuse a model whose architecture or label map does not fit the task ``kind``: its head, and
    labels that are neither generic (``LABEL_0``) nor invalid for the kind (B-/I-/O for NER)."""
    suffix, need, stage = kind.head, kind.needs, kind.stage
    archs = config.get("architectures") or []
    labels = {int(k): v for k, v in (config.get("id2label") or {}).items()}
    found = f"found architecture {', '.join(archs) or 'none'} " + (
        f"with labels {labels}" if labels else "and no label map"
    )
    generic = not labels or all(GENERIC_LABEL.fullmatch(str(v)) for v in labels.values())
    wrong = not any(a.endswith(suffix) for a in archs) or generic
    if wrong or not kind.valid_labels([str(v) for v in labels.values()]):
        raise MinisciError(f"{model_dir}: not {need}; {found}; pass a model from the {stage} stage")


def check_encoder(model_dir: str | Path, config: dict) -> None:
    """Refuse a fine-tuned task model where an encoder that embeds texts is expected (``minisci
    index``): its encoder was trained for its head's labels, and its vectors would rank documents by
    those labels, not by meaning. Its kind is the registry's (:func:`minisci.tasks.registry.of_config`)."""
    from minisci.tasks import registry

    kind = registry.of_config(config)
    if kind is not None:
        archs = ", ".join(config.get("architectures") or [])
        raise MinisciError(
            f"{model_dir}: a fine-tuned {kind.title} model (architecture {archs}, for `minisci {kind.command}`), "
            "not an encoder that embeds texts; pass models/embeddings or another encoder"
        )


def max_positions(config: dict) -> int:
    """Word pieces the model can take at once (RoBERTa-style models reserve two positions)."""
    n = int(config.get("max_position_embeddings", 512))
    return n - 2 if config.get("model_type") in ("roberta", "xlm-roberta", "camembert") else n


def check_max_length(max_length: int, config: dict, model_dir) -> None:
    top = max_positions(config)
    if not MIN_LENGTH <= max_length <= top:
        raise MinisciError(
            f"--max-length {max_length}: must be between {MIN_LENGTH} and {top} (the maximum positions of {model_dir})"
        )


def is_sentence_transformer(model_dir: str | Path) -> bool:
    return (Path(model_dir) / "modules.json").is_file()


def resolve_device(device: str) -> str:
    """``auto``: CUDA when available, else CPU; ``cuda`` without a GPU is an error, not a silent CPU run."""
    import torch

    if device not in DEVICES:
        raise MinisciError(f"--device {device!r}: choose from {list(DEVICES)}")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise MinisciError("--device cuda: no CUDA device is available; use --device cpu")
    return device


@contextmanager
def loading(model_dir: str | Path):
    """Translate what transformers raises for a broken model directory into a one-line error, with
    transformers quiet meanwhile (:func:`quiet_transformers`)."""
    from safetensors import SafetensorError  # a truncated or damaged model.safetensors

    with quiet_transformers():
        try:
            yield
        except (OSError, ValueError, KeyError, TypeError, SafetensorError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise MinisciError(f"{model_dir}: cannot load the model: {first}") from None


@contextmanager
def quiet_transformers():
    """One line of our own per failure, not transformers' load reports and progress bars, while the
    block runs; the caller's logging settings come back after it (a library leaves them alone)."""
    from transformers.utils import logging as hf_logging

    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # e.g. the load report of an encoder saved with pretraining heads
    hf_logging.disable_progress_bar()  # "Loading weights"; our own bars show the work
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def load_task_model(model_dir: str | Path, kind: TaskKind, device: str = "cpu"):
    """(model, tokenizer) for the task ``kind``, checked: architecture, labels, safetensors, every head weight
    present (a head that transformers would initialise at random is an error, not a warning)."""
    import transformers

    path = Path(model_dir)
    config = read_config(path)
    check_task(path, config, kind)
    check_weights(path)
    if config.get("crf") or "BertCrfForTokenClassification" in config.get("architectures", []):  # a CRF tagger
        from minisci.finetune.crf import CrfForTokenClassification as cls
    else:
        cls = getattr(transformers, kind.auto_class)
    with loading(path):
        # ignore_mismatched_sizes: a weight whose shape config.json contradicts is reported below in one
        # line naming it, where transformers would raise after logging a table
        model, info = cls.from_pretrained(
            path,
            use_safetensors=True,
            local_files_only=True,
            trust_remote_code=False,
            output_loading_info=True,
            ignore_mismatched_sizes=True,
        )
        from minisci.encoding import check_tokenizer_files

        check_tokenizer_files(path)
        tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    if info["missing_keys"]:
        missing = ", ".join(sorted(info["missing_keys"])[:4])
        raise MinisciError(f"{path}: weights missing from model.safetensors ({missing}); the task head is untrained")
    if info["mismatched_keys"]:
        raise MinisciError(mismatch_message(path, model.config.num_labels, info["mismatched_keys"]))
    fit_tokenizer(tokenizer, config)
    return model.to(device).eval(), tokenizer


def mismatch_message(path: Path, n_labels: int, mismatched) -> str:
    """Why the weights do not fit ``config.json``: most often a label map edited or replaced after
    training, so the head in ``model.safetensors`` has another number of labels than ``id2label``."""
    key, saved, expected = sorted(mismatched, key=lambda m: m[0])[0]
    saved, expected = list(saved), list(expected)
    if expected[:1] == [n_labels] and saved[:1] != [n_labels]:  # the head's output rows are the labels
        return (
            f"{path}: config.json has {n_labels} labels (id2label/num_labels) but the head in model.safetensors "
            f"has {saved[0]} ({key}: shape {saved}); the label map does not belong to these weights"
        )
    return (
        f"{path}: config.json does not fit model.safetensors: {key} has shape {saved} there, {expected} by config.json"
    )


def fit_tokenizer(tokenizer, config: dict) -> None:
    """Cap the tokenizer's ``model_max_length`` at the model's positions: a tokenizer built with the
    ``tokenizers`` library has a huge sentinel there, and one saved for a bigger model says 512 where
    the model takes 64, and either lets a long text through untruncated to an index error."""
    top = max_positions(config)
    if not tokenizer.model_max_length or tokenizer.model_max_length > top:
        tokenizer.model_max_length = top


def window_room(tokenizer) -> int:
    """Word pieces of text in one window (the special tokens take the rest)."""
    return tokenizer.model_max_length - tokenizer.num_special_tokens_to_add()


def check_stride(stride: int, tokenizer, model_dir) -> None:
    """The overlap must leave room for new text in every window."""
    room = window_room(tokenizer)
    if not 0 <= stride < room:
        raise MinisciError(
            f"stride {stride}: must be between 0 and {room - 1} (a window of {model_dir} holds {room} word pieces "
            "of text; the overlap must be smaller)"
        )
