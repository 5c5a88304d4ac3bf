"""Hybrid retrieval in `minisci index`/`search`, the encoder's content hash in the index, the encoder
line `minisci index` prints, and one embedding whichever way the saved model is loaded."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from conftest import REPO

from minisci.errors import MinisciError
from minisci.lexical import Bm25, fuse, ranks, tokenize
from minisci.serve import cli
from minisci.serve.api import Index
from minisci.serve.search import build_index, load_index, read_collection, recommend_reviewers, search

PAPERS = REPO / "tests" / "fixtures" / "papers.jsonl"


def other_model(tiny_model_dir, out, seed: int = 1):
    """Another random model of the same size and dimension as the tiny one."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    torch.manual_seed(seed)
    model = AutoModel.from_config(AutoModel.from_pretrained(tiny_model_dir).config)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(out)
    return out


def test_bm25_and_fusion():
    bm25 = Bm25.build(["aspirin after surgery", "cisplatin for lung cancer", "graphs and shortest paths"])
    s = bm25.scores("Lung cancer and cisplatin")
    assert np.argmax(s) == 1 and s[0] == 0.0
    assert bm25.scores("the and of").tolist() == [0.0, 0.0, 0.0]  # stop words only
    assert tokenize("The Lung-cancer, of 2 mice") == ["lung", "cancer", "2", "mice"]
    assert ranks(np.array([[0.1, 0.9, 0.5]])).tolist() == [[3, 1, 2]]
    fused = fuse(np.array([[0.9, 0.1, 0.5]]), np.array([[0.0, 0.2, 3.0]]))[0]
    assert np.argmax(fused) == 2  # second by one, first by the other beats first-and-last
    # a document sharing no word with the query gets nothing from BM25: the dense order stands
    dense = np.array([[0.2, 0.9, 0.5]])
    assert ranks(fuse(dense, np.zeros((1, 3)))).tolist() == ranks(dense).tolist() == [[3, 1, 2]]


def test_a_bm25_index_finds_only_documents_that_share_a_word(tiny_model_dir, tmp_path, capsys):
    docs = read_collection(PAPERS)
    build_index(tiny_model_dir, docs, tmp_path / "idx", retriever="bm25")
    assert search(tmp_path / "idx", "xylophone melodies", k=3) == []
    assert Index(tmp_path / "idx").search("xylophone melodies", k=3) == []
    assert search(tmp_path / "idx", docs[3]["title"], k=1)[0]["id"] == docs[3]["id"]
    assert cli.main(["search", "--index", str(tmp_path / "idx"), "xylophone melodies"]) == 0
    assert "no document shares a word with the query" in capsys.readouterr().err


def test_hybrid_index_records_its_retriever_and_encoder(tiny_model_dir, tmp_path):
    docs = read_collection(PAPERS)
    info = build_index(tiny_model_dir, docs, tmp_path / "idx", retriever="hybrid")
    _, _, recorded = load_index(tmp_path / "idx")
    assert recorded["retriever"] == "hybrid" == info["retriever"] and len(recorded["encoder_sha256"]) == 64
    title = docs[3]["title"]
    assert search(tmp_path / "idx", title, k=1)[0]["id"] == docs[3]["id"]  # BM25 finds a paper by its own title
    assert Index(tmp_path / "idx").search(title, k=1)[0]["id"] == docs[3]["id"]
    assert recommend_reviewers(tmp_path / "idx", docs[3]["_text"], k=2)


def test_default_retriever_is_the_one_recorded_beside_the_model(tiny_model_dir, tmp_path, capsys):
    model = shutil.copytree(tiny_model_dir, tmp_path / "embeddings")
    (model / "retrieval.json").write_text(json.dumps({"encoder": "shipped", "retriever": "hybrid"}))
    argv = ["index", "--model", str(model), "--docs", str(PAPERS), "--out", str(tmp_path / "idx"), "--device", "cpu"]
    assert cli.main(argv) == 0
    out, err = capsys.readouterr()
    assert f"minisci index: encoder {model} (the base model as shipped" in err
    assert "hybrid retriever" in out and (tmp_path / "idx/bm25").is_dir()
    argv[-3:-2] = [str(tmp_path / "dense")]
    assert cli.main([*argv, "--retriever", "dense"]) == 0
    assert load_index(tmp_path / "dense")[2]["retriever"] == "dense"


def test_index_prints_the_encoder_it_uses(tiny_model_dir, tmp_path, capsys):
    argv = ["index", "--model", str(tiny_model_dir), "--docs", str(PAPERS), "--out", str(tmp_path / "idx")]
    assert cli.main([*argv, "--device", "cpu"]) == 0
    err = capsys.readouterr().err
    assert f"minisci index: encoder {tiny_model_dir}" in err
    assert load_index(tmp_path / "idx")[2]["retriever"] == "dense"  # no retrieval.json: dense


def test_a_copied_index_refuses_another_encoder_of_the_same_dimension(tiny_model_dir, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(tiny_model_dir, a / "models/embeddings")
    build_index(a / "models/embeddings", read_collection(PAPERS)[:5], a / "index")
    other_model(tiny_model_dir, b / "models/embeddings")
    shutil.copytree(a / "index", b / "index")  # relative path ../models/embeddings finds b's model
    query = "antibiotic resistance"
    # a's model still exists at the absolute path the index records: found there, by its content
    assert search(b / "index", query, k=3) == search(a / "index", query, k=3)
    shutil.rmtree(a)
    with pytest.raises(MinisciError) as e:
        search(b / "index", query, k=3)
    msg = str(e.value)
    assert "\n" not in msg and str(b / "index") in msg and str(b / "index" / "../models/embeddings") in msg
    assert "built with another encoder" in msg
    with pytest.raises(MinisciError, match="built with another encoder"):
        search(b / "index", query, model=b / "models/embeddings")
    assert cli.main(["search", "--index", str(b / "index"), query]) == 1


def test_saved_model_encode_equals_index_and_stage_vectors(tiny_model_dir, tmp_path):
    """SentenceTransformer(dir).encode == `minisci index` == the stage's evaluation, for texts that fit
    one window (the saved model encodes at the evaluation length)."""
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer, BertConfig

    from minisci.encoding import embed, load_encoder
    from minisci.finetune.embeddings import sentence_model

    base = tmp_path / "base"  # the tiny model with room for whole fixture abstracts in one window
    config = BertConfig(
        **{**AutoModel.from_pretrained(tiny_model_dir).config.to_dict(), "max_position_embeddings": 512}
    )
    AutoModel.from_config(config).save_pretrained(base)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(base)
    sentence_model(base, 512).save(str(tmp_path / "st"))
    docs = read_collection(PAPERS)[:8]  # 123 to 434 word pieces: beyond the training length, within one window
    texts = [d["_text"] for d in docs]
    build_index(tmp_path / "st", docs, tmp_path / "idx", max_length=512)
    index_vecs = np.load(tmp_path / "idx/embeddings.npy")
    encoded = SentenceTransformer(str(tmp_path / "st"), device="cpu").encode(texts)
    stage_vecs = embed(*load_encoder(tmp_path / "st"), texts, max_length=512)  # what dense_scores computes
    for a, b in ((encoded, index_vecs), (stage_vecs, index_vecs)):
        cos = np.sum(a * b, axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        assert cos.min() >= 0.999


def test_author_holdout_finds_authors_by_their_other_papers():
    from minisci.serve.search import author_holdout

    topics = np.eye(3, dtype=np.float32)
    docs = [{"id": str(i), "authors": [f"author{i % 3}"]} for i in range(9)] + [{"id": "x", "authors": ["solo"]}]
    vecs = np.stack([topics[i % 3] for i in range(9)] + [topics[0]])
    out = author_holdout(vecs, docs, k=1)
    assert out == {"authors": 3, "single_paper_authors": 1, "k": 1, "found_in_top_k": 1.0, "chance": 0.25}
    moved = vecs.copy()
    moved[6:9] = topics[[1, 2, 0]]  # each author's latest paper is on another author's topic
    assert author_holdout(moved, docs, k=1)["found_in_top_k"] == 0.0


def test_a_model_folder_without_tokenizer_files_is_refused(tiny_model_dir, tmp_path):
    """transformers would build a tokenizer of a few special tokens and read every word as [UNK]."""
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_model_dir / name, bare / name)
    with pytest.raises(MinisciError, match=r"bare: no tokenizer files \(one of tokenizer.json, vocab.txt"):
        build_index(bare, read_collection(PAPERS), tmp_path / "idx")
    assert not (tmp_path / "idx").exists()
