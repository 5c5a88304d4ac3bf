import json
import random

import pytest
from conftest import tiny_params

from minisci.config import MakePairsConfig, from_dict
from minisci.data.pairs import IS_NEXT, NOT_NEXT, build_pairs, make_pairs
from minisci.errors import DataFormatError, MinisciError
from minisci.io import write_jsonl


def cfg(**kw):
    return from_dict(MakePairsConfig, tiny_params({"make_pairs": kw})["make_pairs"], "make_pairs")


def synthetic_docs(n_docs=40, n_sents=12):
    """Every sentence names its document and position, so provenance is checkable from text."""
    return [
        {
            "id": f"d{d}",
            "domain": "biomedical" if d % 5 else "general",
            "sentences": [
                f"doc{d} sent{s} " + "word " * random.Random(d * 100 + s).randint(3, 15) + "end."
                for s in range(n_sents)
            ],
        }
        for d in range(n_docs)
    ]


def sentence_ids(segment):
    return [
        tuple(int(x[4:]) if x.startswith("sent") else int(x[3:]) for x in part.split()[:2])
        for part in segment.split(" end.")
        if part.strip()
    ]


@pytest.fixture
def docs_file(tmp_path):
    path = tmp_path / "documents.jsonl"
    write_jsonl(path, synthetic_docs())
    return path


def test_label_balance_and_provenance(docs_file):
    train, held, m = make_pairs(docs_file, cfg(n_pairs=2000, n_heldout_pairs=200, max_pairs_per_doc=0))
    assert len(train) == 2000 and len(held) == 200
    assert 0.45 < m["train"]["isnext_fraction"] < 0.55
    for p in train + held:
        a, b = sentence_ids(p["a"]), sentence_ids(p["b"])
        assert {d for d, _ in a} == {int(p["doc_a"][1:])}
        assert {d for d, _ in b} == {int(p["doc_b"][1:])}
        if p["label"] == IS_NEXT:  # B is the true continuation: same document, next sentence
            assert p["doc_a"] == p["doc_b"] and b[0][1] == a[-1][1] + 1
            assert [s for _, s in a + b] == list(range(a[0][1], b[-1][1] + 1))
        else:
            assert p["label"] == NOT_NEXT and p["doc_a"] != p["doc_b"]


def test_heldout_pairs_use_only_heldout_documents(docs_file):
    train, held, m = make_pairs(docs_file, cfg(n_pairs=300, n_heldout_pairs=50))
    train_docs = {p[k] for p in train for k in ("doc_a", "doc_b")}
    held_docs = {p[k] for p in held for k in ("doc_a", "doc_b")}
    assert not train_docs & held_docs
    assert m["heldout_docs"] == 8 and m["train_docs"] == 32


def test_per_document_cap_spreads_pairs(docs_file):
    train, _, _ = make_pairs(docs_file, cfg(n_pairs=40, max_pairs_per_doc=1))
    assert len({p["doc_a"] for p in train}) == 32  # one per training doc in the first pass ...
    assert len(train) == 40  # ... and a second pass fills the rest


def test_word_budget(docs_file):
    train, _, _ = make_pairs(docs_file, cfg(n_pairs=500, max_words=30, short_seq_prob=0.0))
    for p in train:  # a chunk stops at the first sentence that reaches the budget
        assert len(p["a"].split()) + len(p["b"].split()) < 30 + 20


def test_deterministic(docs_file):
    c = cfg(n_pairs=300)
    assert json.dumps(make_pairs(docs_file, c)[:2]) == json.dumps(make_pairs(docs_file, c)[:2])
    assert json.dumps(make_pairs(docs_file, c)[0]) != json.dumps(make_pairs(docs_file, cfg(n_pairs=300, seed=99))[0])


def test_bad_inputs(tmp_path):
    p = tmp_path / "d.jsonl"
    write_jsonl(p, [{"id": "a", "sentences": ["x y z."]}])
    with pytest.raises(DataFormatError, match="need at least 2 documents"):
        make_pairs(p, cfg())
    p.write_text('{"id": "a", "sentences": []}\n')
    with pytest.raises(DataFormatError, match=r"d.jsonl:1: expected \{'id': str, 'sentences'"):
        make_pairs(p, cfg())
    one_sentence_docs = [{"id": str(i), "sentences": ["only one sentence here."]} for i in range(5)]
    with pytest.raises(MinisciError, match="no document has two sentences"):
        build_pairs(one_sentence_docs, 10, cfg(), random.Random(0))
