"""MLM-only packing: full blocks, one corpus per block, held-out documents only in held-out blocks,
written as memory-mapped Arrow shards."""

import json

import pytest
from conftest import TINY_MODEL, tiny_params

from minisci.config import MakePairsConfig, ModelConfig, from_dict
from minisci.pretrain.data import heldout_ids
from minisci.pretrain.model import load_tokenizer
from minisci.pretrain.packing import build_packed_shards, load_shards, pack_corpus, packed_blocks


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(ModelConfig(**TINY_MODEL))


def docs(corpus: str, word: str, n: int) -> list[dict]:
    return [
        {"id": f"{corpus}{i}", "domain": corpus, "sentences": [f"{word} number {i} goes here .", f"and {word} again ."]}
        for i in range(n)
    ]


def test_blocks_are_full_and_drop_only_the_last_remainder(tokenizer):
    blocks = list(pack_corpus(docs("a", "alpha", 20), tokenizer, 16))
    assert blocks and all(len(b["input_ids"]) == 16 for b in blocks)
    assert all(
        b["input_ids"][0] == tokenizer.cls_token_id and b["input_ids"][-1] == tokenizer.sep_token_id for b in blocks
    )
    text_ids = sum(
        len(tokenizer(" ".join(d["sentences"]), add_special_tokens=False)["input_ids"]) + 1
        for d in docs("a", "alpha", 20)
    )
    assert len(blocks) == text_ids // 14  # every full block of the stream, none padded


def test_no_block_spans_two_corpora(tokenizer):
    alpha, beta = tokenizer.convert_tokens_to_ids(["alpha", "beta"])
    blocks = list(packed_blocks(docs("a", "alpha", 7) + docs("b", "beta", 7), tokenizer, 16))
    assert {b["corpus"] for b in blocks} == {"a", "b"} and [b["idx"] for b in blocks] == list(range(len(blocks)))
    for b in blocks:
        assert (alpha in b["input_ids"]) != (beta in b["input_ids"])


@pytest.mark.slow  # datasets' generator builder: ~10 s idle, a minute on a busy 2-core machine
def test_no_block_spans_corpora_and_heldout_text_stays_out_of_training(tmp_path, tokenizer):
    alpha, beta = tokenizer.convert_tokens_to_ids(["alpha", "beta"])
    corpus = docs("a", "alpha", 30) + docs("b", "beta", 30)
    (tmp_path / "documents.jsonl").write_text("".join(json.dumps(d) + "\n" for d in corpus))
    split = from_dict(MakePairsConfig, {**tiny_params()["make_pairs"], "heldout_doc_fraction": 0.2}, "make_pairs")
    held_ids, n_docs = heldout_ids(tmp_path / "documents.jsonl", split)
    assert n_docs == 60 and len(held_ids) == 12  # make_pairs's split: a fifth of the documents
    counts = build_packed_shards(tmp_path / "documents.jsonl", tokenizer, 16, held_ids, tmp_path)
    train, held = load_shards(tmp_path / "train"), load_shards(tmp_path / "heldout")
    assert counts["train"]["blocks"] == len(train) and counts["train"]["tokens"] == 16 * len(train)
    for row in train:
        assert not (alpha in row["input_ids"] and beta in row["input_ids"])  # one corpus per block
        assert {d[0] for d in row["docs"]} == {row["corpus"]}
    held_docs = {d for row in held for d in row["docs"]}
    assert held_docs <= held_ids
    assert held_docs and not held_docs & {d for row in train for d in row["docs"]}
    assert set(train.column_names) >= {"input_ids", "token_type_ids", "next_sentence_label", "length", "idx"}
