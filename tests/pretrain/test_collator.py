import pytest
import torch
from conftest import TINY_MODEL

from minisci.config import ModelConfig
from minisci.pretrain.collator import IGNORE, MlmNspCollator, encode_pair
from minisci.pretrain.model import load_tokenizer


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(ModelConfig(**TINY_MODEL))


def features(tok, n=400, seed=0):
    g = torch.Generator().manual_seed(seed)
    ordinary = torch.arange(2000, 29000)
    out = []
    for i in range(n):
        la, lb = 5 + i % 40, 3 + i % 30
        ids = ordinary[torch.randint(len(ordinary), (la + lb,), generator=g)].tolist()
        out.append(
            {
                **encode_pair(ids[:la], ids[la:], tok.cls_token_id, tok.sep_token_id, 128),
                "next_sentence_label": i % 2,
                "idx": i,
            }
        )
    return out


def test_masking_rates_special_tokens_and_label_layout(tok):
    feats = features(tok)
    coll = MlmNspCollator(tok, 0.15, seed=1)
    batch = coll(feats)
    original = coll.pad(feats)["input_ids"]
    special = torch.isin(original, torch.tensor(tok.all_special_ids)) | (batch["attention_mask"] == 0)
    selected = batch["labels"] != IGNORE
    assert not (selected & special).any()  # [CLS], [SEP] and padding are never selected
    assert torch.equal(batch["labels"][selected], original[selected])
    rate = selected.sum() / (~special).sum()
    assert 0.14 < rate < 0.16
    masked = (batch["input_ids"] == tok.mask_token_id) & selected
    kept = (batch["input_ids"] == original) & selected
    n = selected.sum()
    assert 0.77 < masked.sum() / n < 0.83
    assert 0.08 < kept.sum() / n < 0.125  # 10% kept + the rare random draw of the same token
    assert 0.08 < (n - masked.sum() - kept.sum()) / n < 0.12  # random replacements
    assert torch.equal(batch["input_ids"][~selected], original[~selected])
    assert batch["next_sentence_label"].tolist() == [i % 2 for i in range(len(feats))]


def test_dynamic_padding_and_per_example_determinism(tok):
    feats = features(tok, n=6)
    coll = MlmNspCollator(tok, 0.15, pad_to_multiple_of=8, seed=3)
    b = coll(feats)
    assert b["input_ids"].shape[1] == (max(len(f["input_ids"]) for f in feats) + 7) // 8 * 8
    # An example's masks depend on (seed, epoch, idx) only, not on the batch it lands in.
    alone = coll([feats[4]])
    n = len(feats[4]["input_ids"])
    assert torch.equal(alone["input_ids"][0, :n], b["input_ids"][4, :n])
    assert torch.equal(alone["labels"][0, :n], b["labels"][4, :n])
    coll.epoch = 1  # a new epoch masks anew
    assert not torch.equal(coll([feats[4]])["labels"], alone["labels"])
    assert not torch.equal(MlmNspCollator(tok, 0.15, seed=4)([feats[4]])["labels"], alone["labels"])


def test_every_row_gets_at_least_one_prediction(tok):
    feats = [{**encode_pair([2000], [2001], tok.cls_token_id, tok.sep_token_id, 16), "idx": i} for i in range(50)]
    b = MlmNspCollator(tok, 0.01, seed=0)(feats)
    assert ((b["labels"] != IGNORE).sum(dim=1) == 1).all()


def test_whole_word_masking_selects_all_pieces_of_a_word(tok):
    text = "immunohistochemistry of hepatocellular carcinoma with thrombocytopenia and nephrotoxicity " * 6
    ids = tok(text, add_special_tokens=False)["input_ids"]
    feats = [
        {**encode_pair(ids[:60], ids[60:100], tok.cls_token_id, tok.sep_token_id, 128), "idx": i} for i in range(64)
    ]
    coll = MlmNspCollator(tok, 0.3, whole_word=True, seed=0)
    b = coll(feats)
    pieces = tok.convert_ids_to_tokens(feats[0]["input_ids"])
    sel = b["labels"] != IGNORE
    for row in sel:
        for i, p in enumerate(pieces):
            if p.startswith("##"):
                assert row[i] == row[i - 1], f"piece {p!r} selected apart from its word"
    assert sel.float().mean() > 0.1


def test_encode_pair_truncation_keeps_the_boundary():
    e = encode_pair(list(range(10, 30)), list(range(50, 60)), 1, 2, 16)
    # The longer segment is trimmed first: A keeps its tail, B its head.
    assert e["input_ids"] == [1, *range(23, 30), 2, *range(50, 56), 2]
    assert e["token_type_ids"] == [0] * 9 + [1] * 7
    assert encode_pair([5], [6], 1, 2, 16)["input_ids"] == [1, 5, 2, 6, 2]
