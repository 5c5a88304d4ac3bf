"""Packed blocks for MLM-only pretraining, written as memory-mapped Arrow shards.

MLM without NSP needs no sentence pairs: contiguous text packed into full blocks, as Hugging Face's
``run_mlm.py`` ``group_texts`` does, wastes no padding. Each block is ``[CLS] <block_size - 2 word
pieces> [SEP]``; documents are joined with ``[SEP]`` so the model sees where one ends.

No leakage: a block never spans two corpora (each corpus is packed on its own, its last partial
block dropped, as ``group_texts`` drops the remainder), and held-out blocks come only from the
held-out documents (the same documents ``make_pairs`` holds out, chosen by the same seeded split),
so pretraining evaluation never scores text that training saw.

Why Arrow (``datasets.Dataset.save_to_disk``) and not ``.npy`` shards: the trainer and the
evaluation already read a ``datasets.Dataset``, which ``load_from_disk`` memory-maps (the blocks
never live in Python lists); the rows keep named columns (``input_ids``, ``corpus``, ``doc``) for
checks; and ``Dataset.from_generator`` writes the shards while the blocks stream out, so building
them holds one batch of documents, not the corpus. Tokenisation runs once, in the stage that
writes the shards, and DVC caches its output by its inputs.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from minisci.data.readers import iter_sample

TOKENIZE_BATCH = 256  # documents per tokenizer call (the fast tokenizer batches in Rust)


def iter_documents(path: str | Path) -> Iterator[dict]:
    """``{'id', 'domain', 'sentences'}`` of a ``sample_corpus`` documents file, checked line by line."""
    for obj in iter_sample(path):
        yield {"id": obj["id"], "domain": str(obj.get("domain", "corpus")), "sentences": obj["sentences"]}


def pack_corpus(docs: Iterable[dict], tokenizer, block_size: int) -> Iterator[dict]:
    """Blocks of exactly ``block_size`` ids from the documents of ONE corpus, in order."""
    cls, sep, n = tokenizer.cls_token_id, tokenizer.sep_token_id, block_size - 2
    buffer: list[int] = []
    owners: list[str] = []  # the document of each buffered id, so a block knows what it holds
    batch: list[dict] = []

    def flush(batch):
        texts = [" ".join(d["sentences"]) for d in batch]
        for d, ids in zip(batch, tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]):
            buffer.extend([*ids, sep])
            owners.extend([d["id"]] * (len(ids) + 1))
        while len(buffer) >= n:
            yield {
                "input_ids": [cls, *buffer[:n], sep],
                "docs": sorted(set(owners[:n])),
            }
            del buffer[:n], owners[:n]

    for d in docs:
        batch.append(d)
        if len(batch) == TOKENIZE_BATCH:
            yield from flush(batch)
            batch = []
    if batch:
        yield from flush(batch)


def packed_blocks(docs, tokenizer, block_size: int) -> Iterator[dict]:
    """Every corpus packed on its own (in order of first appearance), rows ready for the trainer.
    ``docs``: a list of documents, or a function that gives a fresh stream of them (read once for
    the corpora, then once per corpus: a file is never held in memory)."""
    stream = docs if callable(docs) else (lambda: iter(docs))
    corpora = list(dict.fromkeys(d.get("domain", "corpus") for d in stream()))
    idx = 0
    for corpus in corpora:
        for block in pack_corpus((d for d in stream() if d.get("domain", "corpus") == corpus), tokenizer, block_size):
            yield {
                "input_ids": block["input_ids"],
                "token_type_ids": [0] * block_size,
                "next_sentence_label": 0,  # unused: MLM only
                "length": block_size,
                "idx": idx,  # stable example id: its masks depend on it, not on batch order
                "corpus": corpus,
                "docs": block["docs"],
            }
            idx += 1


def part_documents(documents: str, held: frozenset[str], part: str) -> Iterator[dict]:
    """The training (``part="train"``) or held-out documents of a documents file, streamed."""
    return (d for d in iter_documents(documents) if (d["id"] in held) == (part == "heldout"))


def _features():
    import datasets

    return datasets.Features(
        {
            "input_ids": datasets.Sequence(datasets.Value("int32")),
            "token_type_ids": datasets.Sequence(datasets.Value("int8")),
            "next_sentence_label": datasets.Value("int8"),
            "length": datasets.Value("int32"),
            "idx": datasets.Value("int64"),
            "corpus": datasets.Value("string"),
            "docs": datasets.Sequence(datasets.Value("string")),
        }
    )


def build_packed_shards(
    documents: str | Path, tokenizer, block_size: int, held: frozenset[str], out: str | Path
) -> dict:
    """``out/train`` and ``out/heldout`` as Arrow datasets of packed blocks, streamed from the
    documents file; ``held``: the held-out document ids (``make_pairs``'s split). Counts per corpus."""
    import datasets

    counts = {}
    for name in ("train", "heldout"):
        with tempfile.TemporaryDirectory() as cache:  # not the user's datasets cache: the output is the cache
            ds = datasets.Dataset.from_generator(
                packed_blocks,
                gen_kwargs={
                    "docs": functools.partial(part_documents, str(documents), held, name),
                    "tokenizer": tokenizer,
                    "block_size": block_size,
                },
                features=_features(),
                cache_dir=cache,
            )
            ds.save_to_disk(str(Path(out) / name))
        ds = load_shards(Path(out) / name)
        counts[name] = {"blocks": len(ds), "tokens": len(ds) * block_size}
        corpora = [c for batch in ds.select_columns("corpus").iter(batch_size=10_000) for c in batch["corpus"]]
        for corpus in sorted(set(corpora)):
            counts[name][f"blocks_{corpus}"] = corpora.count(corpus)
    return counts


def load_shards(path: str | Path):
    """A saved split, memory-mapped (nothing is read into memory until a row is asked for)."""
    import datasets

    return datasets.load_from_disk(str(path))
