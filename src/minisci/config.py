"""Typed, frozen configuration: one dataclass per ``params.yaml`` section, and the two catalogues.

Every stage loads exactly its own section with :func:`load_section`. Unknown keys raise (a typo in
``params.yaml`` or in ``dvc exp run -S`` must not be silently ignored), missing keys raise, and each
dataclass validates its values in ``__post_init__``. The evaluation datasets and the pretraining
corpora are catalogues in files of their own (:data:`DATASETS_FILE`, :data:`CORPORA_FILE`), read with
:func:`load_catalog` and :func:`load_corpora`, with the same checks.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from minisci.errors import ConfigError
from minisci.tasks import facts


def _check(cond: bool, section: str, msg: str) -> None:
    if not cond:
        raise ConfigError(f"params section '{section}': {msg}")


# numpy's and torch's seed range: a seed outside it fails deep inside a library (numpy's and
# transformers' ``set_seed`` raise, with a traceback), after the stages before
SEED_RANGE = (0, 2**32 - 1)


def check_seeds(seeds: Iterable[int], section: str, key: str) -> None:
    """Seeds in :data:`SEED_RANGE`; ``key`` names them in the message (``seed`` or ``seeds``)."""
    for seed in seeds:
        _check(
            SEED_RANGE[0] <= seed <= SEED_RANGE[1],
            section,
            f"{key} must be in [0, 2**32 - 1] (numpy's and torch's seed range), got {seed}",
        )


def _check_decay(decay: float, section: str) -> None:
    """AdamW checks its default weight decay, not a parameter group's: a negative one would train,
    pushing the weights outward."""
    _check(decay >= 0, section, f"weight_decay must be >= 0 (0 = off), got {float(decay)}")


def _check_names(names: tuple[str, ...], section: str, key: str) -> None:
    """Dataset names are catalogue keys (checked against the catalogue where the stage loads it)."""
    _check(len(set(names)) == len(names), section, f"{key} lists a dataset twice: {list(names)}")


# The dataset catalogue: one entry per dataset under ``datasets`` in data/datasets.yaml ----------------

# Repository-relative, as DVC runs every stage from the repository root. Not params.yaml sections:
# `dvc exp show` lists every key of params.yaml, and these are dozens of fields no experiment changes.
DATASETS_FILE = "data/datasets.yaml"
CORPORA_FILE = "data/corpora.yaml"

# A catalogue name becomes a DVC stage name (prepare_data@NAME), a folder and a params key
# (datasets.NAME) on stage commands: no space, dot or other character any of those would split at.
DATASET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
TAG_SCHEMES = ("IOB1", "IOB2", "auto")
# The catalogue fields that only one file format reads; a field of another format is refused, not ignored.
FORMAT_FIELDS = {"conll": ("tag_column", "scheme", "keep_types"), "jsonl": ("text_field", "label_field")}
SPLITS = ("train", "dev", "test")


@dataclasses.dataclass(frozen=True)
class DatasetConfig:
    """One catalogue entry: where a dataset's files are, how to read them and what to keep.

    ``dir`` is repository-relative: a folder that ``fetch_data`` fills from the checksummed mirror
    (``data/raw/...``) or one the user adds with ``dvc add`` / ``dvc import-url``. ``prepare_data``
    reads it and writes the normalised splits that the fine-tuning stages use.
    """

    task: str  # a task kind of minisci.tasks: ner | classification
    dir: str  # repository-relative folder holding the split files
    splits: dict  # split name (train, dev, test) -> file name inside dir
    format: str  # conll (ner) | jsonl (classification)
    tag_column: int = -1  # conll: column of the tag (0-based; negative counts from the end); the token is column 0
    scheme: str = "auto"  # conll: IOB1, IOB2, or auto (detected from train, reported)
    labels: tuple[str, ...] | None = None  # ner: entity types; classification: classes; None = read from train
    keep_types: tuple[str, ...] | None = None  # ner: keep only these entity types (the others become O)
    text_field: str = "text"  # jsonl: the field holding the text
    label_field: str = "label"  # jsonl: the field holding the label
    published: dict | None = None  # published test scores for context in the report: {metric: {system: score}}

    def __post_init__(self) -> None:
        s = "datasets"
        _check(self.task in facts.FACTS, s, f"task must be one of {facts.names()}, got {self.task!r}")
        formats = facts.get(self.task).formats
        _check(self.format in formats, s, f"format of a {self.task} dataset must be one of {formats}")
        _check(bool(self.dir), s, "dir must be a non-empty path")
        _check(
            sorted(self.splits) == sorted(SPLITS),
            s,
            f"splits must name exactly {list(SPLITS)}, got {sorted(self.splits)}",
        )
        _check(
            all(isinstance(v, str) and v for v in self.splits.values()), s, "split file names must be non-empty strings"
        )
        _check(self.scheme in TAG_SCHEMES, s, f"scheme must be one of {TAG_SCHEMES}")
        _check(
            self.labels is None or len(self.labels) > 0,
            s,
            "labels is empty; list them, or null to read them from train",
        )
        _check(self.labels is None or len(set(self.labels)) == len(self.labels), s, "labels must be distinct, or null")
        if "jsonl" in formats:  # texts with a label field
            _check(self.keep_types is None, s, "keep_types applies to ner datasets only")
            _check(bool(self.text_field) and bool(self.label_field), s, "text_field and label_field must be non-empty")
        else:  # CoNLL columns
            _check(self.tag_column != 0, s, "tag_column 0 is the token column")
            _check(
                self.keep_types is None or len(self.keep_types) > 0,
                s,
                "keep_types must list at least one type, or be null",
            )
        for metric, systems in (self.published or {}).items():
            ok = isinstance(systems, dict) and all(
                isinstance(v, (int, float)) and 0 <= v <= 1 for v in systems.values()
            )
            _check(ok, s, f"published.{metric} must map system names to scores in [0, 1]")

    def path(self, split: str) -> Path:
        return Path(self.dir) / self.splits[split]


def _catalogue_section(path: str | Path, key: str, what: str) -> dict:
    """The ``key`` mapping of a catalogue file, non-empty (one line naming the file otherwise)."""
    if not Path(path).is_file():
        raise ConfigError(f"{path}: {what} file not found (DVC runs the stages from the repository root)")
    section = load_params(path).get(key)
    if not isinstance(section, dict) or not section:
        raise ConfigError(f"{path}: missing or empty '{key}' mapping ({what})")
    return section


def _entry_error(path: str | Path, e: ConfigError, key: str, name: str) -> ConfigError:
    """A validation message of an entry, naming the file and the entry instead of a params section."""
    msg = str(e).replace(f"params section '{key}.{name}'", f"'{key}.{name}'")
    msg = msg.replace(f"params section '{key}'", f"'{key}.{name}'").replace(f"params {key}.{name}.", f"{key}.{name}.")
    return ConfigError(f"{path}: {msg}")


def load_catalog(path: str | Path = DATASETS_FILE) -> dict[str, DatasetConfig]:
    """Every entry of the dataset catalogue, validated (errors name the file and ``datasets.<name>``)."""
    section = _catalogue_section(path, "datasets", "the dataset catalogue")
    out = {}
    for name, entry in section.items():
        if not isinstance(name, str) or not DATASET_NAME.fullmatch(name):
            raise ConfigError(
                f"{path}: dataset name {name!r} in 'datasets' must start with a letter or digit and hold only "
                "letters, digits, '_' and '-' (it names stages, folders and params keys)"
            )
        try:
            out[name] = from_dict(DatasetConfig, entry, f"datasets.{name}")
            mine = FORMAT_FIELDS.get(out[name].format, ())
            foreign = [f for fmt, fields in FORMAT_FIELDS.items() for f in fields if f in entry and f not in mine]
            _check(
                not foreign,
                f"datasets.{name}",
                f"{', '.join(foreign)} {'is a field' if len(foreign) == 1 else 'are fields'} of another file format; "
                f"a {out[name].format} ({out[name].task}) dataset does not read {'it' if len(foreign) == 1 else 'them'}",
            )
            _check(
                is_inside_repository(out[name].dir),
                f"datasets.{name}",
                f"dir {out[name].dir!r} is outside the repository, where DVC does not version it: "
                "bring the data in with 'dvc add' or 'dvc import-url' and give its repository path",
            )
        except ConfigError as e:  # __post_init__ messages say "datasets"; name the file and the entry
            raise _entry_error(path, e, "datasets", name) from None
    return out


def is_inside_repository(path: str | Path) -> bool:
    """Whether a catalogue path is repository-relative and stays inside: a dataset elsewhere runs,
    but no commit records it, so the result could not be reproduced from the repository. Refused
    rather than warned about, because a warning scrolls by while the run it concerns still ends in
    metrics, a report and a verdict that look reproducible."""
    return not Path(path).is_absolute() and Path(os.path.normpath(path)).parts[:1] != (os.pardir,)


def catalog_entry(name: str, task: str | None = None, path: str | Path = DATASETS_FILE) -> DatasetConfig:
    """The catalogue entry ``name``, checked to exist (and to be of ``task``)."""
    catalog = load_catalog(path)
    if name not in catalog:
        raise ConfigError(f"{path}: no dataset '{name}' in the 'datasets' catalogue; declared: {sorted(catalog)}")
    if task is not None and catalog[name].task != task:
        raise ConfigError(f"{path}: dataset '{name}' is a {catalog[name].task} dataset, not {task}")
    return catalog[name]


def check_finetune_datasets(path: str | Path = "params.yaml", catalogue: str | Path = DATASETS_FILE) -> None:
    """Every dataset a fine-tuning stage lists is a catalogue entry of its task: one line naming the
    known ones otherwise (checked by the first stage, before DVC looks for data/prepared/<name>).
    A catalogue left in ``params.yaml`` is refused too: no stage would read it."""
    params = load_params(path)
    for key, file in (("datasets", catalogue), ("corpora", CORPORA_FILE)):
        if key in params:
            raise ConfigError(f"{path}: '{key}' is a catalogue, not a params section: move it to {file}")
    catalog = load_catalog(catalogue)
    sections = [kind.stage for kind in facts.FACTS.values()]
    if not any(params.get(section, {}).get("datasets") for section in sections):
        raise ConfigError(
            f"{path}: no dataset to fine-tune on: list at least one catalogue entry in "
            + " or ".join(f"{section}.datasets" for section in sections)
        )
    for kind in facts.FACTS.values():
        section, task = kind.stage, kind.name
        names = params.get(section, {}).get("datasets") or []
        known = sorted(n for n, entry in catalog.items() if entry.task == task)
        for name in names:
            if catalog.get(name) is None or catalog[name].task != task:
                raise ConfigError(
                    f"{path}: {section}.datasets names '{name}', which is not a {task} dataset of the "
                    f"catalogue; known: {', '.join(known)}"
                )


# The corpus catalogue: one entry per pretraining corpus under the ``corpora`` section ------------------

CORPUS_FORMATS = ("jsonl", "parquet", "txt", "hf")


@dataclasses.dataclass(frozen=True)
class CorpusConfig:
    """One pretraining corpus: where its files are, which fields hold what, and its share of the sample.

    ``path`` is one file (``jsonl`` plain or ``.gz``, ``parquet``); ``dir`` a folder: of such files
    (read in name order), of ``.txt`` files (one document each, its relative path the id), or a
    Hugging Face dataset saved with ``save_to_disk`` (``hf``). Without ``id_field`` a document's id
    is a hash of its text, so the same text keeps its place in the sample wherever it is.
    """

    format: str  # jsonl | parquet | txt | hf
    weight: float  # share of the sampled *documents* (relative to the other corpora's weights)
    path: str | None = None  # a file
    dir: str | None = None  # a folder
    text_field: str | None = None  # the document text (required; txt: the file's content, no field)
    id_field: str | None = None  # a unique id (str or int); None = a hash of the text
    title_field: str | None = None  # an optional title, searched by the guard and kept as a paragraph
    source_field: str | None = None  # where a document came from (kept in the corpus rows); None = the corpus name
    kind_field: str | None = None  # document kind; "fulltext_sections" text is split into paragraphs at newlines
    flag_field: str | None = None  # a boolean the corpus builder set for text overlapping evaluation data
    filter: dict | None = None  # keep only documents whose field equals the value (or is in the list)

    def __post_init__(self) -> None:
        s = "corpora"
        _check(self.format in CORPUS_FORMATS, s, f"format must be one of {CORPUS_FORMATS}, got {self.format!r}")
        _check((self.path is None) != (self.dir is None), s, "give exactly one of path (a file) or dir (a folder)")
        _check(bool(self.path or self.dir), s, "path/dir must be a non-empty path")
        _check(self.weight > 0, s, f"weight must be > 0 (a share of the sampled documents), got {self.weight}")
        if self.format in ("txt", "hf"):
            _check(self.dir is not None, s, f"a {self.format} corpus is a folder: give dir, not path")
        if self.format == "txt":
            fields = ("text_field", "id_field", "title_field", "source_field", "kind_field", "flag_field", "filter")
            given = [f for f in fields if getattr(self, f) is not None]
            _check(not given, s, f"a txt corpus has no fields (a file is a document, its path the id); remove {given}")
        else:
            _check(bool(self.text_field), s, "text_field is required: the field that holds a document's text")
        for field, value in (self.filter or {}).items():
            ok = isinstance(value, (str, int, bool)) or (
                isinstance(value, list) and value and all(isinstance(v, (str, int, bool)) for v in value)
            )
            _check(ok, s, f"filter.{field} must be a string, integer, boolean or a non-empty list of them")

    @property
    def location(self) -> str:
        return self.path or self.dir

    @property
    def fields(self) -> tuple[str, ...]:
        """The record fields this entry reads (a Parquet or Arrow reader loads only these columns)."""
        named = (self.text_field, self.id_field, self.title_field, self.source_field, self.kind_field, self.flag_field)
        return tuple(dict.fromkeys([f for f in named if f] + list(self.filter or {})))


# Names a corpus cannot have: sample_corpus reports each corpus as <name>_docs, <name>_sentences and
# <name>_words beside its own totals, and these names would write over them (pool_docs, total_words, ...).
RESERVED_CORPUS_NAMES = (
    "tapt",
    "pool",
    "total",
    "excluded_tapt",
    "dropped_docs_without",
    "dropped_short",
    "guard_test",
)


def load_corpora(path: str | Path = CORPORA_FILE) -> dict[str, CorpusConfig]:
    """Every entry of the corpus catalogue, validated (errors name the file and ``corpora.<name>``)."""
    section = _catalogue_section(path, "corpora", "the pretraining corpus catalogue")
    out = {}
    for name, entry in section.items():
        if re.fullmatch(r"[A-Za-z0-9_.-]+", str(name)) is None or name in RESERVED_CORPUS_NAMES:
            raise ConfigError(
                f"{path}: corpus name {name!r} in 'corpora': letters, digits, '_', '-', '.' only, and none of "
                f"{', '.join(RESERVED_CORPUS_NAMES)} ('tapt' is the task-adaptive text; the others would overwrite "
                "sample_corpus's own metrics, <name>_docs and the like)"
            )
        try:
            out[str(name)] = from_dict(CorpusConfig, entry, f"corpora.{name}")
        except ConfigError as e:
            raise _entry_error(path, e, "corpora", name) from None
    return out


@dataclasses.dataclass(frozen=True)
class FetchDataConfig:
    mirror: str  # local directory holding an offline copy of the data files

    def __post_init__(self) -> None:
        _check(bool(self.mirror), "fetch_data", "mirror must be a non-empty path")


@dataclasses.dataclass(frozen=True)
class SampleCorpusConfig:
    n_docs: int
    seed: int
    min_sentence_words: int
    guard_min_words: int
    tapt_datasets: tuple[str, ...]
    punkt_train_chars: int

    def __post_init__(self) -> None:
        s = "sample_corpus"
        check_seeds([self.seed], s, "seed")
        _check(self.n_docs > 0, s, f"n_docs must be > 0, got {self.n_docs}")
        _check(self.min_sentence_words >= 1, s, "min_sentence_words must be >= 1")
        _check(self.guard_min_words >= 3, s, "guard_min_words must be >= 3 (shorter matches are noise)")
        _check(self.punkt_train_chars > 0, s, "punkt_train_chars must be > 0")
        _check_names(self.tapt_datasets, s, "tapt_datasets")


@dataclasses.dataclass(frozen=True)
class MakePairsConfig:
    n_pairs: int
    n_heldout_pairs: int
    heldout_doc_fraction: float
    max_words: int
    short_seq_prob: float
    max_pairs_per_doc: int
    seed: int

    def __post_init__(self) -> None:
        s = "make_pairs"
        check_seeds([self.seed], s, "seed")
        _check(self.n_pairs > 0, s, "n_pairs must be > 0")
        _check(self.n_heldout_pairs > 0, s, "n_heldout_pairs must be > 0")
        _check(0.0 < self.heldout_doc_fraction < 1.0, s, "heldout_doc_fraction must be in (0, 1)")
        _check(self.max_words >= 8, s, "max_words must be >= 8")
        _check(0.0 <= self.short_seq_prob < 1.0, s, "short_seq_prob must be in [0, 1)")
        _check(self.max_pairs_per_doc >= 0, s, "max_pairs_per_doc must be >= 0 (0 = no cap)")


PRECISIONS = ("auto", "fp32", "bf16", "fp16")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    base: str  # package:NAME, a local directory, a Hugging Face id (from the local cache), or scratch
    tokenizer: str | None = None  # where to take the tokenizer from; None = same as base
    scratch_config: dict | None = None  # BertConfig keyword arguments when base == "scratch"

    def __post_init__(self) -> None:
        _check(bool(self.base), "model", "base must be non-empty")
        if self.base == "scratch":
            _check(isinstance(self.scratch_config, dict), "model", "base: scratch needs a scratch_config mapping")
            _check(self.tokenizer is not None, "model", "base: scratch needs a tokenizer")
        # The scratch config's keys are checked against BertConfig by check_scratch_config: where a
        # model is built and in the code_fingerprint stage, not at every load of this section.


# BertConfig fields that scratch_config must not set: the tokenizer fixes the vocabulary, the rest is bookkeeping.
_SCRATCH_RESERVED = {"vocab_size", "_name_or_path", "transformers_version", "model_type", "architectures"}
_SCRATCH_SIZES = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")


def pinned_bert_config() -> dict:
    """``BertConfig().to_dict()``'s keys and the sizes' defaults in the transformers that requirements.txt
    pins, so that the always-run code_fingerprint stage checks a scratch config without importing
    transformers and torch (4 s on 2 cores). Any other transformers version is asked directly;
    tests/test_config_loading.py compares this table with the installed BertConfig."""
    return {
        "transformers": "5.23.0",
        "keys": (
            "_name_or_path add_cross_attention architectures attention_probs_dropout_prob bos_token_id "
            "chunk_size_feed_forward classifier_dropout dtype eos_token_id hidden_act hidden_dropout_prob "
            "hidden_size id2label initializer_range intermediate_size is_decoder is_encoder_decoder label2id "
            "layer_norm_eps max_position_embeddings model_type num_attention_heads num_hidden_layers "
            "output_attentions output_hidden_states pad_token_id problem_type return_dict tie_word_embeddings "
            "transformers_version type_vocab_size use_cache vocab_size"
        ).split(),
        "sizes": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072},
    }


def bert_config_fields() -> tuple[set[str], dict]:
    """(BertConfig's keys, the defaults of :data:`_SCRATCH_SIZES`): from :func:`pinned_bert_config` when
    the installed transformers is the one it was read from, else from BertConfig itself."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("transformers")
    except PackageNotFoundError:
        installed = None
    pinned = pinned_bert_config()
    if installed == pinned["transformers"]:
        return set(pinned["keys"]), pinned["sizes"]
    from transformers import BertConfig  # imports torch: seconds

    defaults = BertConfig().to_dict()
    return set(defaults), {key: defaults[key] for key in _SCRATCH_SIZES}


def check_scratch_config(sc: dict) -> None:
    """``model.scratch_config``'s keys are BertConfig's own (BertConfig accepts any keyword silently, so
    a typo would build a BERT-base-sized model); sizes are positive and the hidden size splits evenly
    into heads."""
    keys, defaults = bert_config_fields()
    unknown = sorted(set(sc) - (keys - _SCRATCH_RESERVED))
    _check(not unknown, "model", f"scratch_config has unknown or reserved keys {unknown}; see transformers.BertConfig")
    for key in _SCRATCH_SIZES:
        value = sc.get(key, defaults[key])
        ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
        _check(ok, "model", f"scratch_config.{key} must be a positive int, got {value!r}")
    hidden, heads = (
        sc.get("hidden_size", defaults["hidden_size"]),
        sc.get("num_attention_heads", defaults["num_attention_heads"]),
    )
    _check(
        hidden % heads == 0,
        "model",
        f"scratch_config.hidden_size ({hidden}) must be divisible by num_attention_heads ({heads})",
    )


class _SpeedKeys:
    """A section's keys that change how fast a stage runs, never what it computes (``SPEED_KEYS``, each
    with a test that the outputs are equal either way): left out of the runs' identity, the model
    cards and the stage's DVC params, so a GPU node can set them, resume and rerun nothing."""

    SPEED_KEYS: tuple[str, ...] = ()

    def result_params(self) -> dict:
        """The params without :attr:`SPEED_KEYS`: what decides the bytes."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in self.SPEED_KEYS}


@dataclasses.dataclass(frozen=True)
class PretrainConfig(_SpeedKeys):
    epochs: float
    max_steps: int
    batch_size: int
    grad_accum: int
    learning_rate: float
    head_learning_rate: float
    head_warmup_steps: int
    warmup_ratio: float
    weight_decay: float
    max_seq_length: int
    mlm_probability: float
    whole_word_masking: bool
    precision: str
    eval_batch_size: int
    logging_steps: int
    save_steps: int
    save_total_limit: int
    seed: int
    nsp: bool = True  # false: MLM loss only; the NSP head and pooler stay as loaded
    vocab_extension: int = 0  # whole words to add to the vocabulary (0 = the base vocabulary as is)
    vocab_min_pieces: int = 3  # a word is a candidate if the base WordPiece splits it into this many pieces
    dataloader_workers: int = 0  # processes that build batches (masking, padding); the bytes do not depend on it
    seed_processes: int = 1  # pretraining seeds trained at once (minisci.pretrain.seed_processes); the same bytes

    SPEED_KEYS = ("dataloader_workers", "seed_processes")

    def __post_init__(self) -> None:
        s = "pretrain"
        check_seeds([self.seed], s, "seed")
        _check_decay(self.weight_decay, s)
        _check(self.seed_processes >= 1, s, "seed_processes must be >= 1 (1 = the seeds one after another)")
        _check(
            self.dataloader_workers >= 0,
            s,
            "dataloader_workers must be >= 0 (0 = batches built in the training process)",
        )
        _check(self.vocab_extension >= 0, s, "vocab_extension must be >= 0 (0 = off)")
        _check(self.vocab_min_pieces >= 2, s, "vocab_min_pieces must be >= 2 (one-piece words are in the vocabulary)")
        _check(self.epochs > 0 or self.max_steps > 0, s, "set epochs > 0 or max_steps > 0")
        _check(
            self.batch_size > 0 and self.eval_batch_size > 0 and self.grad_accum > 0,
            s,
            "batch sizes and grad_accum must be > 0",
        )
        _check(self.learning_rate > 0 and self.head_learning_rate > 0, s, "learning rates must be > 0")
        _check(self.head_warmup_steps >= 0, s, "head_warmup_steps must be >= 0")
        _check(0.0 <= self.warmup_ratio < 1.0, s, "warmup_ratio must be in [0, 1)")
        _check(16 <= self.max_seq_length <= 512, s, "max_seq_length must be in [16, 512]")
        _check(0.0 < self.mlm_probability < 1.0, s, "mlm_probability must be in (0, 1)")
        _check(self.precision in PRECISIONS, s, f"precision must be one of {PRECISIONS}")
        _check(
            self.logging_steps > 0 and self.save_steps > 0 and self.save_total_limit > 0,
            s,
            "logging_steps, save_steps and save_total_limit must be > 0",
        )


LOSSES = ("ce", "welt", "inverse_frequency", "effective_number")


@dataclasses.dataclass(frozen=True)
class _FinetuneConfig(_SpeedKeys):
    """Knobs both fine-tuning stages share."""

    epochs: float
    eval_delay: int  # dev is scored at the end of every epoch >= eval_delay, and always after the last
    batch_size: int
    eval_batch_size: int
    learning_rate: float
    weight_decay: float
    warmup_ratio: float
    max_length: int
    loss: str
    beta: float
    precision: str
    logging_steps: int
    max_train_examples: int
    max_eval_examples: int  # dev and test are scored on a seeded subset of this many (0 = all)
    seeds: tuple[int, ...]
    datasets: tuple[str, ...]  # catalogue entries to fine-tune on, each for both arms
    # processes that fine-tune the seeds at once (1 = one after another); the bytes do not depend on it
    seed_processes: int = dataclasses.field(default=1, kw_only=True)

    SPEED_KEYS = ("seed_processes",)

    def _check_common(self, s: str, losses: tuple[str, ...]) -> None:
        _check(self.seed_processes >= 1, s, "seed_processes must be >= 1 (1 = the seeds one after another)")
        _check_names(self.datasets, s, "datasets")
        check_seeds(self.seeds, s, "seeds")
        _check_decay(self.weight_decay, s)
        _check(self.epochs > 0, s, "epochs must be > 0")
        _check(self.eval_delay >= 0, s, "eval_delay must be >= 0 (0 = score dev after every epoch)")
        _check(self.batch_size > 0 and self.eval_batch_size > 0, s, "batch sizes must be > 0")
        _check(self.learning_rate > 0, s, "learning_rate must be > 0")
        _check(0.0 <= self.warmup_ratio < 1.0, s, "warmup_ratio must be in [0, 1)")
        _check(16 <= self.max_length <= 512, s, "max_length must be in [16, 512]")
        _check(self.loss in losses, s, f"loss must be one of {losses}")
        _check(0.0 < self.beta < 1.0, s, "beta must be in (0, 1)")
        _check(self.precision in PRECISIONS, s, f"precision must be one of {PRECISIONS}")
        _check(
            len(self.seeds) >= 1 and len(set(self.seeds)) == len(self.seeds),
            s,
            "seeds must be a non-empty list of distinct ints",
        )
        _check(self.logging_steps > 0, s, "logging_steps must be > 0")
        _check(self.max_train_examples >= 0, s, "max_train_examples must be >= 0 (0 = all)")
        _check(self.max_eval_examples >= 0, s, "max_eval_examples must be >= 0 (0 = all)")


@dataclasses.dataclass(frozen=True)
class FinetuneNerConfig(_FinetuneConfig):
    crf: bool

    def __post_init__(self) -> None:
        s = "finetune_ner"
        self._check_common(s, LOSSES)
        _check(not self.crf or self.loss == "ce", s, "crf: true trains with the CRF likelihood; set loss: ce")


@dataclasses.dataclass(frozen=True)
class FinetuneClassificationConfig(_FinetuneConfig):
    def __post_init__(self) -> None:
        self._check_common("finetune_classification", ("ce", "inverse_frequency", "effective_number"))


@dataclasses.dataclass(frozen=True)
class FinetuneEmbeddingsConfig:
    encoder: str
    n_train: int
    hard_negatives: bool
    n_test_queries: int
    n_dev_queries: int
    n_candidates: int
    n_dev_candidates: int
    epochs: float
    batch_size: int
    learning_rate: float
    warmup_ratio: float
    max_length: int
    scale: float
    eval_batch_size: int
    eval_max_length: int
    equivalence_margin: float
    bootstrap_resamples: int
    precision: str
    logging_steps: int
    seed: int

    def __post_init__(self) -> None:
        s = "finetune_embeddings"
        check_seeds([self.seed], s, "seed")
        _check(self.encoder in ("auto", "baseline", "adapted"), s, "encoder must be auto, baseline or adapted")
        _check(self.n_train >= 2, s, "n_train must be >= 2")
        _check(
            self.n_test_queries >= 2 and self.n_dev_queries >= 2,
            s,
            "n_test_queries and n_dev_queries must be >= 2",
        )
        _check(
            self.n_candidates > self.n_test_queries and self.n_dev_candidates > self.n_dev_queries,
            s,
            "n_candidates must exceed n_test_queries and n_dev_candidates n_dev_queries (distractors)",
        )
        _check(
            self.epochs > 0 and self.batch_size >= 2, s, "epochs must be > 0 and batch_size >= 2 (in-batch negatives)"
        )
        _check(self.learning_rate > 0, s, "learning_rate must be > 0")
        _check(0.0 <= self.warmup_ratio < 1.0, s, "warmup_ratio must be in [0, 1)")
        _check(16 <= self.max_length <= 512 and 16 <= self.eval_max_length <= 512, s, "lengths must be in [16, 512]")
        _check(
            self.scale > 0 and self.eval_batch_size > 0 and self.logging_steps > 0,
            s,
            "scale, eval_batch_size, logging_steps must be > 0",
        )
        _check(
            0 < self.equivalence_margin < 1 and self.bootstrap_resamples >= 100,
            s,
            "equivalence_margin must be in (0, 1) and bootstrap_resamples >= 100",
        )
        _check(self.precision in PRECISIONS, s, f"precision must be one of {PRECISIONS}")


@dataclasses.dataclass(frozen=True)
class ExportMetricsConfig:
    bootstrap_resamples: int
    seed: int
    equivalence_margin_ner: float
    equivalence_margin_classification: float
    error_examples: int

    def __post_init__(self) -> None:
        s = "export_metrics"
        check_seeds([self.seed], s, "seed")
        _check(self.bootstrap_resamples >= 100, s, "bootstrap_resamples must be >= 100")
        _check(
            0 < self.equivalence_margin_ner < 100 and 0 < self.equivalence_margin_classification < 100,
            s,
            "equivalence margins must be in (0, 100) points",
        )
        _check(self.error_examples >= 0, s, "error_examples must be >= 0")

    def margin(self, task: str) -> float:
        """The equivalence margin of a task kind as a fraction (params are in points of the metric):
        the field ``equivalence_margin_<kind>``."""
        return getattr(self, f"equivalence_margin_{task}") / 100


T = TypeVar("T")

# YAML 1.1 (PyYAML) reads 1e-4 as a string: a float needs a dot (1.0e-4). Such strings are accepted
# for float params; the pattern keeps 'inf', 'nan' and '1_000' out.
_FLOAT_RE = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


def _coerce_float(value: Any, where: str) -> float:
    if isinstance(value, str) and _FLOAT_RE.match(value.strip()):
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}: expected float, got {value!r}")
    if not math.isfinite(value):
        raise ConfigError(f"{where}: expected a finite number, got {value!r}")
    return float(value)


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Convert YAML values to the annotated type (lists to tuples) and reject wrong types."""
    origin = typing.get_origin(tp)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        (item_tp, _) = typing.get_args(tp)
        return tuple(_coerce(v, item_tp, where) for v in value)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(value, inner[0], where)
    if tp is float:
        return _coerce_float(value, where)
    if tp is dict and not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a mapping, got {value!r}")
    if tp in (int, str, bool):
        if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
            hint = (
                " (write integers without an exponent or a dot)"
                if tp is int and isinstance(value, (str, float))
                else ""
            )
            raise ConfigError(
                f"{where}: expected {tp.__name__}, got {value!r}{hint}"
                f"{f' (quote it in YAML: {str(value)!r})' if tp is str and isinstance(value, (int, float)) else ''}"
            )
    return value


def from_dict(cls: type[T], data: dict[str, Any], section: str) -> T:
    """Build dataclass ``cls`` from a mapping; unknown and missing keys raise ConfigError."""
    if not isinstance(data, dict):
        raise ConfigError(f"params section '{section}' must be a mapping, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"params section '{section}': unknown keys {unknown}; allowed: {sorted(fields)}")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, field in fields.items():
        if name not in data:
            has_default = field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
            if has_default:
                continue
            raise ConfigError(f"params section '{section}': missing key '{name}'")
        kwargs[name] = _coerce(data[name], hints[name], f"params {section}.{name}")
    return cls(**kwargs)


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys (plain YAML silently keeps the last value)."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise ConfigError(f"{self.name}:{line}: duplicate key {key!r} (first at line {seen[key]})")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _yaml_error(path: Path, e: yaml.YAMLError) -> ConfigError:
    """One line naming the file and line; tabs get a hint, since YAML's own message does not say."""
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    where = f"{path}:{mark.line + 1}" if mark is not None else f"{path}"
    problem = getattr(e, "problem", None) or str(e)
    hint = "; YAML cannot be indented with tabs, use spaces" if "\\t" in problem or "\t" in problem else ""
    return ConfigError(f"{where}: invalid YAML ({' '.join(problem.split())}){hint}")


def load_params(path: str | Path = "params.yaml") -> dict[str, Any]:
    """Parse ``params.yaml`` strictly: UTF-8, valid YAML, no duplicate keys; errors name file and line."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: params file not found" + (" (it is a directory)" if path.is_dir() else ""))
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: not UTF-8: byte 0x{data[e.start]:02x} at byte offset {e.start}") from None
    loader = _StrictLoader(text)
    loader.name = str(path)
    try:
        params = loader.get_single_data()
    except yaml.YAMLError as e:
        raise _yaml_error(path, e) from None
    finally:
        loader.dispose()
    if not isinstance(params, dict):
        raise ConfigError(f"{path}: expected a mapping of sections")
    return params


def load_section(cls: type[T], section: str, path: str | Path = "params.yaml") -> T:
    params = load_params(path)
    if section not in params:
        raise ConfigError(f"{path}: missing section '{section}'")
    return from_dict(cls, params[section], section)


def finetune_config(kind: facts.KindFacts) -> type:
    """The dataclass of a task kind's fine-tuning section (the ``config`` of its facts or its
    :class:`~minisci.tasks.kind.TaskKind`)."""
    return globals()[kind.config]
