"""Pretraining examples, tokenised once: what the ``pretrain_data`` stage writes and every
``pretrain@<seed>`` reads (``data/pretrain``).

Two layouts, set by ``pretrain.nsp``:

* ``pairs`` (``nsp: true``, BERT): the sentence pairs of ``make_pairs``, each encoded as
  ``[CLS] a [SEP] b [SEP]`` with segment ids and its NSP label;
* ``blocks`` (``nsp: false``, MLM only, the objective every non-BERT encoder takes): the sampled
  documents' text packed into full blocks of ``pretrain.max_seq_length`` word pieces, each corpus on
  its own, held-out blocks from ``make_pairs``'s held-out documents (:mod:`minisci.pretrain.packing`).

The folder holds ``train/`` and ``heldout/`` (Arrow, written by ``datasets``' ``save_to_disk`` and
memory-mapped by ``load_from_disk``: the examples never live in Python lists), ``tokenizer/`` (the
base tokenizer, plus the whole-word tokens of ``pretrain.vocab_extension`` planned on the training
text) and ``manifest.json`` (layout, sizes, the vocabulary plan, the unknown-word rate).

So the pretraining seeds share one tokenisation, and DVC caches it by its inputs: a change of the
learning rate or of the seeds does not tokenise again. The input is read as a stream (validation,
the vocabulary plan, tokenisation), so memory does not grow with the number of pairs or documents
beyond ``datasets``' write buffer and the list of document ids.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from minisci.config import MakePairsConfig, ModelConfig, PretrainConfig
from minisci.errors import DataFormatError, MinisciError
from minisci.io import iter_jsonl, sha256_file
from minisci.pretrain.collator import encode_pair
from minisci.pretrain.model import load_tokenizer
from minisci.pretrain.packing import build_packed_shards, iter_documents
from minisci.pretrain.vocab import VocabExtension, add_tokens, plan_extension
from minisci.progress import Progress
from minisci.training import UNK_SAMPLE_WORDS, check_unk_rate

MANIFEST = "manifest.json"
LAYOUTS = ("pairs", "blocks")
TOKENIZE_BATCH = 256  # documents per tokenizer call when counting (the fast tokenizer batches in Rust)
PARALLEL_FROM = 50_000  # pairs from which tokenisation runs in one process per core
COUNT_KEYS = ("train_documents", "train_tokens", "heldout_documents", "heldout_tokens")
BUILT_WITH = ("nsp", "max_seq_length", "vocab_extension", "vocab_min_pieces")  # the params the folder depends on


def layout_of(cfg: PretrainConfig) -> str:
    return "pairs" if cfg.nsp else "blocks"


# reading ----------------------------------------------------------------------------------------------


def iter_pairs(path: str | Path) -> Iterator[dict]:
    """The pairs of a ``make_pairs`` file, checked line by line."""
    n = 0
    for lineno, obj in iter_jsonl(path):
        if not (isinstance(obj.get("a"), str) and isinstance(obj.get("b"), str) and obj.get("label") in (0, 1)):
            raise DataFormatError(path, lineno, "expected {'a': str, 'b': str, 'label': 0 or 1}")
        n += 1
        yield {"a": obj["a"], "b": obj["b"], "label": obj["label"]}
    if not n:
        raise DataFormatError(path, None, "no pairs")


def read_pairs(path: str | Path) -> list[dict]:
    return list(iter_pairs(path))


def heldout_ids(documents: str | Path, split: MakePairsConfig) -> tuple[frozenset[str], int]:
    """The documents ``make_pairs`` holds out (same fraction, same seeded split), from the ids alone,
    and the number of documents."""
    from minisci.data.pairs import split_documents

    ids = [{"id": d["id"]} for d in iter_documents(documents)]
    _, held = split_documents(ids, split.heldout_doc_fraction, random.Random(f"{split.seed}-split"))
    return frozenset(d["id"] for d in held), len(ids)


def sampled_words(texts: Iterable[str], n_texts: int, sample_words: int = UNK_SAMPLE_WORDS) -> list[str]:
    """The words :func:`minisci.training.unk_rate` samples from a list of ``n_texts`` texts (every
    ``step``-th text), taken from a stream."""
    step = max(1, n_texts * 20 // sample_words)
    words: list[str] = []
    for i, text in enumerate(texts):
        if i % step == 0:
            words.extend(text.split())
            if len(words) >= sample_words:
                break
    return words[:sample_words]


# pairs ------------------------------------------------------------------------------------------------


def encode_batch(batch: dict, indices: list[int], tokenizer, max_length: int) -> dict:
    # verbose=False: a segment longer than the model's length is truncated by encode_pair, not fed
    # whole (transformers would warn of "indexing errors" that cannot happen)
    a = tokenizer(batch["a"], add_special_tokens=False, verbose=False)["input_ids"]
    b = tokenizer(batch["b"], add_special_tokens=False, verbose=False)["input_ids"]
    enc = [encode_pair(x, y, tokenizer.cls_token_id, tokenizer.sep_token_id, max_length) for x, y in zip(a, b)]
    return {
        "input_ids": [e["input_ids"] for e in enc],
        "token_type_ids": [e["token_type_ids"] for e in enc],
        "next_sentence_label": batch["label"],
        "length": [len(e["input_ids"]) for e in enc],  # for length-grouped batches
        "idx": indices,  # stable example id: its masks depend on it, not on batch order
    }


def tokenize_pairs(rows, tokenizer, max_length: int, num_proc: int | None = None):
    """A ``datasets.Dataset`` of encoded pairs (input_ids, token_type_ids, next_sentence_label,
    length, idx) from a list of pairs or a ``datasets.Dataset`` with columns a, b, label."""
    import datasets

    if not isinstance(rows, datasets.Dataset):
        rows = datasets.Dataset.from_dict({k: [r[k] for r in rows] for k in ("a", "b", "label")})
    return rows.map(
        encode_batch,
        batched=True,
        with_indices=True,
        remove_columns=["a", "b", "label"],
        fn_kwargs={"tokenizer": tokenizer, "max_length": max_length},
        num_proc=num_proc,
        desc="tokenising pairs",
    )


def _pairs_dataset(path: str, cache: str):
    """The pairs of ``path`` as an Arrow dataset on disk (streamed; checked before by iter_pairs)."""
    import datasets

    return datasets.Dataset.from_generator(
        iter_pairs,
        gen_kwargs={"path": path},
        features=datasets.Features(
            {"a": datasets.Value("string"), "b": datasets.Value("string"), "label": datasets.Value("int64")}
        ),
        cache_dir=cache,
    )


def _tokens(ds) -> int:
    return int(sum(sum(b["length"]) for b in ds.select_columns("length").iter(batch_size=10_000)))


# the stage --------------------------------------------------------------------------------------------


def corpus_tokens(documents: str | Path, tokenizer, held: frozenset[str], n_docs: int) -> dict:
    """Per corpus (a document's ``domain``): documents and word pieces of its training and held-out
    documents, under the pretraining tokenizer."""
    out: dict[str, dict[str, int]] = {}
    progress = Progress("pretrain_data: count tokens", n_docs, "documents")
    batch: list[dict] = []
    seen = 0

    def flush():
        texts = [" ".join(d["sentences"]) for d in batch]
        # verbose=False: documents longer than the model's length are counted here, not fed to it
        for d, ids in zip(batch, tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]):
            part = "heldout" if d["id"] in held else "train"
            c = out.setdefault(d["domain"], dict.fromkeys(COUNT_KEYS, 0))
            c[f"{part}_documents"] += 1
            c[f"{part}_tokens"] += len(ids)
        batch.clear()

    for d in iter_documents(documents):
        batch.append(d)
        seen += 1
        if len(batch) == TOKENIZE_BATCH:
            flush()
            progress.update(seen, seen)
    if batch:
        flush()
    progress.update(seen, seen)
    progress.close()
    return {name: out[name] for name in sorted(out)}


def build_pretraining_data(
    pairs_dir: str | Path,
    documents: str | Path | None,
    model_cfg: ModelConfig,
    cfg: PretrainConfig,
    split: MakePairsConfig,
    out: str | Path,
) -> dict:
    """Writes ``out`` (see the module) and returns its manifest. ``documents`` (the sample the pairs
    were made from) gives the word pieces per corpus, and the text of packed blocks; pairs alone
    (``documents=None``) give no counts per corpus."""

    start = time.perf_counter()
    out = Path(out)
    layout = layout_of(cfg)
    tokenizer = load_tokenizer(model_cfg)
    base_vocab_size = len(tokenizer)
    if documents is None and layout == "blocks":
        raise MinisciError("pretrain.nsp: false packs the documents into blocks: pass the documents (--docs)")
    held, n_docs = heldout_ids(documents, split) if documents is not None else (frozenset(), 0)
    if layout == "pairs":
        train_file = Path(pairs_dir) / "train.jsonl"
        # every line of both files checked before anything is written (datasets would wrap the error)
        n_train = sum(1 for _ in iter_pairs(train_file))
        sum(1 for _ in iter_pairs(Path(pairs_dir) / "heldout.jsonl"))

        def texts():
            return (text for r in iter_pairs(train_file) for text in (r["a"], r["b"]))

        n_texts, source, source_hash = 2 * n_train, str(pairs_dir), sha256_file(train_file)
    else:
        n_train = sum(1 for d in iter_documents(documents) if d["id"] not in held)

        def texts():
            return (" ".join(d["sentences"]) for d in iter_documents(documents) if d["id"] not in held)

        n_texts, source = n_train, str(documents)
        # the blocks also depend on the held-out split and the block length
        source_hash = f"{sha256_file(documents)}:{split.heldout_doc_fraction}:{split.seed}:{cfg.max_seq_length}"
    # new whole-word tokens before tokenising, so the examples use them
    plan = plan_extension(texts(), tokenizer, cfg.vocab_extension, cfg.vocab_min_pieces)
    if plan.words:
        add_tokens(tokenizer, plan)
    unk = check_unk_rate(tokenizer, [" ".join(sampled_words(texts(), n_texts))], "pretrain")

    out.mkdir(parents=True, exist_ok=True)
    splits = {}
    with tempfile.TemporaryDirectory(prefix="pretrain_data.") as cache:  # not the user's datasets cache
        if layout == "pairs":
            for name in ("train", "heldout"):
                rows = _pairs_dataset(str(Path(pairs_dir) / f"{name}.jsonl"), cache)
                num_proc = min(os.cpu_count() or 1, 8) if len(rows) >= PARALLEL_FROM else None
                ds = tokenize_pairs(rows, tokenizer, cfg.max_seq_length, num_proc=num_proc)
                ds.save_to_disk(str(out / name))
                splits[name] = {"examples": len(ds), "tokens": _tokens(ds)}
        else:
            counts = build_packed_shards(documents, tokenizer, cfg.max_seq_length, held, out)
            splits = {
                name: {
                    "examples": c["blocks"],
                    "tokens": c["tokens"],
                    **{k: v for k, v in c.items() if k.startswith("blocks_")},
                }
                for name, c in counts.items()
            }
    for name in ("train", "heldout"):
        if not splits[name]["examples"]:
            raise DataFormatError(
                documents if layout == "blocks" else Path(pairs_dir) / f"{name}.jsonl",
                None,
                f"no {name} {layout} of {cfg.max_seq_length} word pieces (too little text)",
            )
    tokenizer.save_pretrained(str(out / "tokenizer"))
    manifest = {
        "layout": layout,
        "built_with": {k: getattr(cfg, k) for k in BUILT_WITH},
        "source": source,
        "source_sha256": source_hash,
        "max_seq_length": cfg.max_seq_length,
        "base_vocab_size": base_vocab_size,
        "vocab": dataclasses.asdict(plan),
        "unk_rate": unk,
        **splits,
        "corpora": corpus_tokens(documents, tokenizer, held, n_docs) if documents is not None else {},
    }
    # no timing in the folder: the same inputs give the same bytes, so a rebuild (after a code edit)
    # leaves every pretraining seed up to date
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return {**manifest, "wall_seconds": round(time.perf_counter() - start, 1)}


# loading ----------------------------------------------------------------------------------------------


@dataclasses.dataclass
class PretrainingData:
    tokenizer: object
    train: object  # datasets.Dataset, memory-mapped
    heldout: object
    manifest: dict
    plan: VocabExtension

    @property
    def layout(self) -> str:
        return self.manifest["layout"]

    @property
    def new_ids(self) -> list[int]:
        return self.tokenizer.convert_tokens_to_ids(list(self.plan.words)) if self.plan.words else []


def load_pretraining_data(path: str | Path, cfg: PretrainConfig) -> PretrainingData:
    """The folder ``build_pretraining_data`` wrote, checked against the pretraining params."""
    import datasets
    from transformers import AutoTokenizer

    path = Path(path)
    if not (path / MANIFEST).is_file():
        raise MinisciError(f"{path}: no {MANIFEST}; build it with stages/pretrain_data.py (dvc repro pretrain_data)")
    manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    built = manifest.get("built_with", {})
    wrong = [f"{k}: {built.get(k)}" for k in BUILT_WITH if built.get(k) != getattr(cfg, k)]
    if wrong:
        raise MinisciError(
            f"{path} was built with pretrain.{', '.join(wrong)}, not this run's params: rebuild it "
            "(dvc repro pretrain_data, or stages/pretrain_data.py)"
        )
    v = manifest["vocab"]
    plan = VocabExtension(tuple(v["words"]), tuple(tuple(p) for p in v["pieces"]), tuple(v["counts"]))
    tokenizer = AutoTokenizer.from_pretrained(str(path / "tokenizer"), local_files_only=True, trust_remote_code=False)
    return PretrainingData(
        tokenizer,
        datasets.load_from_disk(str(path / "train")),
        datasets.load_from_disk(str(path / "heldout")),
        manifest,
        plan,
    )
