"""minisci.batching's collator gives transformers' collators' tensors exactly."""

import random

import pytest
import torch
from transformers import AutoTokenizer, DataCollatorForTokenClassification, DataCollatorWithPadding

from minisci.batching import PadCollator, pad_collator


def features(rng, n, labels):
    out = []
    for _ in range(n):
        ids = [rng.randrange(1, 90) for _ in range(rng.randint(1, 20))]
        f = {"input_ids": ids}
        if labels == "token":
            f["labels"] = [rng.choice([-100, 0, 1, 2]) for _ in ids]
        elif labels == "sequence":
            f["labels"] = rng.randrange(3)
        out.append(f)
    return out


def same(a, b):
    assert set(a) == set(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("labels", [None, "token", "sequence"])
def test_batches_equal_transformers_collators(tiny_model_dir, side, labels):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir, padding_side=side)
    theirs = DataCollatorForTokenClassification(tok) if labels == "token" else DataCollatorWithPadding(tok)
    ours = pad_collator(tok, label_pad=-100 if labels == "token" else None)
    assert isinstance(ours, PadCollator)
    rng = random.Random(len(side) + len(str(labels)))
    for n in (1, 2, 7, 33):
        batch = features(rng, n, labels)
        same(ours(batch), dict(theirs(batch)))


def test_a_tokenizer_without_a_padding_token_gets_transformers_collator(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    tok.pad_token = None
    assert isinstance(pad_collator(tok), DataCollatorWithPadding)
    assert isinstance(pad_collator(tok, label_pad=-100), DataCollatorForTokenClassification)
